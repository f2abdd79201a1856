//! SPDY/3.1 framing (the protocol of the draft "SPDY Protocol - Draft 3.1"), as much of it as the
//! kubelet's side of `portforward.k8s.io` needs: frames are read and written, header blocks are
//! decompressed with the protocol's zlib dictionary (one zlib stream per direction across the
//! whole session) and written compressed without one (a zlib stream that does not announce a
//! dictionary needs none to be read). Flow control is not enforced: frames are small, and the
//! peer (Go's spdystream, behind the API server) does not enforce it either.

use std::io;

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The largest frame this side accepts (SPDY's length field holds 24 bits).
const MAX_FRAME: usize = 0x00ff_ffff;
/// A frame's flag: the sender's half of the stream ends with it.
pub(super) const FLAG_FIN: u8 = 0x01;
const VERSION: u16 = 3;

/// SPDY/3's header-compression dictionary (§2.6.10.1 of the draft).
const DICTIONARY: &[u8] = b"\
    \x00\x00\x00\x07options\x00\x00\x00\x04head\x00\x00\x00\x04post\x00\x00\x00\x03put\x00\
    \x00\x00\x06delete\x00\x00\x00\x05trace\x00\x00\x00\x06accept\x00\x00\x00\x0eaccept-ch\
    arset\x00\x00\x00\x0faccept-encoding\x00\x00\x00\x0faccept-language\x00\x00\x00\x0dacc\
    ept-ranges\x00\x00\x00\x03age\x00\x00\x00\x05allow\x00\x00\x00\x0dauthorization\x00\
    \x00\x00\x0dcache-control\x00\x00\x00\x0aconnection\x00\x00\x00\x0ccontent-base\x00\
    \x00\x00\x10content-encoding\x00\x00\x00\x10content-language\x00\x00\x00\x0econtent-le\
    ngth\x00\x00\x00\x10content-location\x00\x00\x00\x0bcontent-md5\x00\x00\x00\x0dcontent\
    -range\x00\x00\x00\x0ccontent-type\x00\x00\x00\x04date\x00\x00\x00\x04etag\x00\x00\x00\
    \x06expect\x00\x00\x00\x07expires\x00\x00\x00\x04from\x00\x00\x00\x04host\x00\x00\x00\
    \x08if-match\x00\x00\x00\x11if-modified-since\x00\x00\x00\x0dif-none-match\x00\x00\x00\
    \x08if-range\x00\x00\x00\x13if-unmodified-since\x00\x00\x00\x0dlast-modified\x00\x00\
    \x00\x08location\x00\x00\x00\x0cmax-forwards\x00\x00\x00\x06pragma\x00\x00\x00\x12prox\
    y-authenticate\x00\x00\x00\x13proxy-authorization\x00\x00\x00\x05range\x00\x00\x00\x07\
    referer\x00\x00\x00\x0bretry-after\x00\x00\x00\x06server\x00\x00\x00\x02te\x00\x00\x00\
    \x07trailer\x00\x00\x00\x11transfer-encoding\x00\x00\x00\x07upgrade\x00\x00\x00\x0ause\
    r-agent\x00\x00\x00\x04vary\x00\x00\x00\x03via\x00\x00\x00\x07warning\x00\x00\x00\x10w\
    ww-authenticate\x00\x00\x00\x06method\x00\x00\x00\x03get\x00\x00\x00\x06status\x00\x00\
    \x00\x06200 OK\x00\x00\x00\x07version\x00\x00\x00\x08HTTP/1.1\x00\x00\x00\x03url\x00\
    \x00\x00\x06public\x00\x00\x00\x0aset-cookie\x00\x00\x00\x0akeep-alive\x00\x00\x00\x06\
    origin10010120120220520630030230330430530630740240540640740840941041141241341441541641\
    7502504505203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad \
    Request401 Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Impl\
    emented503 Service UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:0\
    0 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gi\
    f,application/xml,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-ag\
    e=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.";

/// A header block: names are lower-case, as SPDY requires.
pub(super) type Headers = Vec<(String, String)>;

/// One frame.
#[derive(Debug, PartialEq)]
pub(super) enum Frame {
    /// A stream opened by the peer.
    SynStream {
        stream: u32,
        flags: u8,
        headers: Headers,
    },
    /// The answer to a stream this side opened.
    SynReply {
        stream: u32,
        flags: u8,
        headers: Headers,
    },
    /// A stream ends abnormally.
    RstStream { stream: u32, status: u32 },
    /// A ping, to be echoed when the peer sent it.
    Ping(u32),
    /// The peer goes away.
    GoAway,
    /// More headers on a stream.
    Headers { stream: u32, flags: u8 },
    /// Data on a stream.
    Data {
        stream: u32,
        flags: u8,
        data: Vec<u8>,
    },
    /// Settings, window updates and what else this side ignores.
    Ignored,
}

/// The most a header block may inflate to. The headers of a kubelet stream are a few hundred
/// bytes; a block that inflates beyond this (a zlib bomb from a client) ends the session.
pub(super) const MAX_HEADER_BLOCK: usize = 64 * 1024;

/// Reads header blocks: one zlib stream across the session, primed with [`DICTIONARY`], each
/// inflating to at most [`MAX_HEADER_BLOCK`] bytes.
pub(super) struct HeaderReader {
    zlib: Decompress,
}

impl HeaderReader {
    pub(super) fn new() -> Self {
        Self {
            zlib: Decompress::new(true),
        }
    }

    fn inflate(&mut self, mut input: &[u8]) -> io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity((input.len() * 4 + 1024).min(MAX_HEADER_BLOCK));
        loop {
            if out.len() >= MAX_HEADER_BLOCK {
                return Err(invalid("header block inflates beyond 64 KiB"));
            }
            if out.capacity() - out.len() < 1024 {
                out.reserve_exact(4096);
            }
            let before_in = self.zlib.total_in();
            let before_out = out.len();
            let result = self
                .zlib
                .decompress_vec(input, &mut out, FlushDecompress::Sync);
            let consumed = usize::try_from(self.zlib.total_in() - before_in)
                .map_err(|_| invalid("header block too large"))?;
            input = input.get(consumed..).unwrap_or_default();
            match result {
                Err(error) if error.needs_dictionary().is_some() => {
                    self.zlib
                        .set_dictionary(DICTIONARY)
                        .map_err(|e| invalid(&format!("header dictionary refused: {e}")))?;
                }
                Err(error) => return Err(invalid(&format!("header block: {error}"))),
                Ok(Status::StreamEnd) => return Ok(out),
                Ok(_) => {
                    let spare = out.len() < out.capacity();
                    if input.is_empty() && spare {
                        return Ok(out);
                    }
                    if consumed == 0 && out.len() == before_out && spare {
                        return Err(invalid("header block does not inflate"));
                    }
                }
            }
        }
    }

    fn read(&mut self, block: &[u8]) -> io::Result<Headers> {
        let plain = self.inflate(block)?;
        let mut cursor = Cursor(&plain);
        let count = cursor.u32()?;
        let mut headers = Vec::new();
        for _ in 0..count {
            let name = cursor.string()?.to_ascii_lowercase();
            let value = cursor.string()?;
            headers.push((name, value));
        }
        Ok(headers)
    }
}

/// Writes header blocks: one zlib stream across the session, without a dictionary.
pub(super) struct HeaderWriter {
    zlib: Compress,
}

impl HeaderWriter {
    pub(super) fn new() -> Self {
        Self {
            zlib: Compress::new(Compression::default(), true),
        }
    }

    fn write(&mut self, headers: &[(String, String)]) -> io::Result<Vec<u8>> {
        let mut plain = Vec::new();
        push_len(&mut plain, headers.len())?;
        for (name, value) in headers {
            push_len(&mut plain, name.len())?;
            plain.extend_from_slice(name.as_bytes());
            push_len(&mut plain, value.len())?;
            plain.extend_from_slice(value.as_bytes());
        }
        let mut out = Vec::with_capacity(plain.len() + 64);
        let mut input = plain.as_slice();
        loop {
            out.reserve(input.len() + 64);
            let before = self.zlib.total_in();
            self.zlib
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .map_err(|e| invalid(&format!("compressing headers: {e}")))?;
            let consumed = usize::try_from(self.zlib.total_in() - before)
                .map_err(|_| invalid("header block too large"))?;
            input = &input[consumed..];
            // A sync flush is complete once it leaves room to spare in the output.
            if input.is_empty() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

fn push_len(out: &mut Vec<u8>, len: usize) -> io::Result<()> {
    let len = u32::try_from(len).map_err(|_| invalid("header too long"))?;
    out.extend_from_slice(&len.to_be_bytes());
    Ok(())
}

struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn u32(&mut self) -> io::Result<u32> {
        let Some((head, rest)) = self.0.split_first_chunk::<4>() else {
            return Err(invalid("truncated frame"));
        };
        self.0 = rest;
        Ok(u32::from_be_bytes(*head))
    }

    fn bytes(&mut self, len: usize) -> io::Result<&[u8]> {
        if self.0.len() < len {
            return Err(invalid("truncated frame"));
        }
        let (head, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(head)
    }

    fn string(&mut self) -> io::Result<String> {
        let len = usize::try_from(self.u32()?).map_err(|_| invalid("header too long"))?;
        String::from_utf8(self.bytes(len)?.to_vec()).map_err(|_| invalid("header is not UTF-8"))
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("SPDY: {what}"))
}

/// Reads the next frame; `None` when the peer closed the connection between frames.
pub(super) async fn read_frame<R: AsyncRead + Unpin>(
    reader: &mut R,
    headers: &mut HeaderReader,
) -> io::Result<Option<Frame>> {
    let mut head = [0u8; 8];
    match reader.read_exact(&mut head).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let flags = head[4];
    let len = usize::from(head[5]) << 16 | usize::from(head[6]) << 8 | usize::from(head[7]);
    if len > MAX_FRAME {
        return Err(invalid("frame too large"));
    }
    let mut payload = vec![0u8; len];
    reader.read_exact(&mut payload).await?;
    if head[0] & 0x80 == 0 {
        let stream = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
        return Ok(Some(Frame::Data {
            stream,
            flags,
            data: payload,
        }));
    }
    let version = u16::from_be_bytes([head[0] & 0x7f, head[1]]);
    if version != VERSION {
        return Err(invalid(&format!("version {version}")));
    }
    let kind = u16::from_be_bytes([head[2], head[3]]);
    let mut cursor = Cursor(&payload);
    let frame = match kind {
        1 => {
            let stream = cursor.u32()? & 0x7fff_ffff;
            let _associated = cursor.u32()?;
            let _priority_and_slot = cursor.bytes(2)?;
            Frame::SynStream {
                stream,
                flags,
                headers: headers.read(cursor.0)?,
            }
        }
        2 => {
            let stream = cursor.u32()? & 0x7fff_ffff;
            Frame::SynReply {
                stream,
                flags,
                headers: headers.read(cursor.0)?,
            }
        }
        3 => Frame::RstStream {
            stream: cursor.u32()? & 0x7fff_ffff,
            status: cursor.u32()?,
        },
        6 => Frame::Ping(cursor.u32()?),
        7 => Frame::GoAway,
        8 => {
            let stream = cursor.u32()? & 0x7fff_ffff;
            // The block still moves the shared decompressor forward.
            headers.read(cursor.0)?;
            Frame::Headers { stream, flags }
        }
        _ => Frame::Ignored,
    };
    Ok(Some(frame))
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> io::Result<Vec<u8>> {
    if payload.len() > MAX_FRAME {
        return Err(invalid("frame too large"));
    }
    let mut out = Vec::with_capacity(8 + payload.len());
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.push(flags);
    out.extend_from_slice(&u32::try_from(payload.len()).unwrap_or(0).to_be_bytes()[1..]);
    out.extend_from_slice(payload);
    Ok(out)
}

/// A `SYN_STREAM` (what a client sends; this side only uses it in tests).
#[cfg(test)]
pub(super) fn syn_stream(
    stream: u32,
    flags: u8,
    headers: &[(String, String)],
    writer: &mut HeaderWriter,
) -> io::Result<Vec<u8>> {
    let mut payload = Vec::new();
    payload.extend_from_slice(&stream.to_be_bytes());
    payload.extend_from_slice(&0u32.to_be_bytes());
    payload.extend_from_slice(&[0, 0]);
    payload.extend(writer.write(headers)?);
    control(1, flags, &payload)
}

/// A `SYN_REPLY` accepting a stream the peer opened.
pub(super) fn syn_reply(
    stream: u32,
    flags: u8,
    headers: &[(String, String)],
    writer: &mut HeaderWriter,
) -> io::Result<Vec<u8>> {
    let mut payload = stream.to_be_bytes().to_vec();
    payload.extend(writer.write(headers)?);
    control(2, flags, &payload)
}

/// A `RST_STREAM` (status 1: protocol error, 5: cancel).
pub(super) fn rst_stream(stream: u32, status: u32) -> io::Result<Vec<u8>> {
    let mut payload = stream.to_be_bytes().to_vec();
    payload.extend_from_slice(&status.to_be_bytes());
    control(3, 0, &payload)
}

/// A `PING` echo.
pub(super) fn ping(id: u32) -> io::Result<Vec<u8>> {
    control(6, 0, &id.to_be_bytes())
}

/// A data frame; `data` may be empty (a bare `FIN`).
pub(super) fn data(stream: u32, flags: u8, data: &[u8]) -> io::Result<Vec<u8>> {
    if data.len() > MAX_FRAME {
        return Err(invalid("frame too large"));
    }
    let mut out = Vec::with_capacity(8 + data.len());
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.push(flags);
    out.extend_from_slice(&u32::try_from(data.len()).unwrap_or(0).to_be_bytes()[1..]);
    out.extend_from_slice(data);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_dictionary_is_the_protocols() {
        // Length and Adler-32 of SPDY/3's dictionary: zlib checks the latter.
        assert_eq!(DICTIONARY.len(), 1423);
        let (mut a, mut b) = (1u32, 0u32);
        for byte in DICTIONARY {
            a = (a + u32::from(*byte)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!(b << 16 | a, 0xe3c6_a7c2);
    }

    #[tokio::test]
    async fn frames_written_are_read_back_across_one_header_stream() {
        let mut writer = HeaderWriter::new();
        let mut bytes = Vec::new();
        let first = headers(&[
            ("streamtype", "error"),
            ("port", "2379"),
            ("requestid", "0"),
        ]);
        let second = headers(&[("streamtype", "data"), ("port", "2379"), ("requestid", "0")]);
        bytes.extend(syn_stream(1, 0, &first, &mut writer).unwrap());
        bytes.extend(syn_stream(3, 0, &second, &mut writer).unwrap());
        bytes.extend(data(3, FLAG_FIN, b"hello").unwrap());
        bytes.extend(ping(7).unwrap());
        let mut reader = HeaderReader::new();
        let mut input = bytes.as_slice();
        let mut frames = Vec::new();
        while let Some(frame) = read_frame(&mut input, &mut reader).await.unwrap() {
            frames.push(frame);
        }
        assert_eq!(
            frames,
            vec![
                Frame::SynStream {
                    stream: 1,
                    flags: 0,
                    headers: first
                },
                Frame::SynStream {
                    stream: 3,
                    flags: 0,
                    headers: second
                },
                Frame::Data {
                    stream: 3,
                    flags: FLAG_FIN,
                    data: b"hello".to_vec()
                },
                Frame::Ping(7),
            ]
        );
    }

    #[test]
    fn a_header_block_compressed_with_the_dictionary_is_read() {
        // What Go's spdystream sends: a zlib stream that announces SPDY's dictionary.
        let mut zlib = Compress::new(Compression::best(), true);
        zlib.set_dictionary(DICTIONARY).unwrap();
        let mut plain = 1u32.to_be_bytes().to_vec();
        plain.extend_from_slice(&4u32.to_be_bytes());
        plain.extend_from_slice(b"port");
        plain.extend_from_slice(&4u32.to_be_bytes());
        plain.extend_from_slice(b"2379");
        let mut block = Vec::with_capacity(256);
        zlib.compress_vec(&plain, &mut block, FlushCompress::Sync)
            .unwrap();
        let mut reader = HeaderReader::new();
        assert_eq!(reader.read(&block).unwrap(), headers(&[("port", "2379")]));
    }

    #[test]
    fn a_truncated_or_garbled_block_is_an_error_not_a_panic() {
        let mut reader = HeaderReader::new();
        assert!(reader.read(&[0x78, 0x9c, 0xff, 0x00]).is_err());
        let mut writer = HeaderWriter::new();
        let block = writer.write(&headers(&[("a", "b")])).unwrap();
        let mut reader = HeaderReader::new();
        assert!(reader.read(&block[..block.len() / 2]).is_err());
    }

    #[test]
    fn a_block_that_inflates_without_bound_ends_the_session() {
        // 8 MiB of zeros compress to about 8 KiB: without the bound, this allocates it all.
        let mut zlib = Compress::new(Compression::best(), true);
        zlib.set_dictionary(DICTIONARY).unwrap();
        let zeros = vec![0u8; 8 << 20];
        let mut block = Vec::with_capacity(1 << 20);
        zlib.compress_vec(&zeros, &mut block, FlushCompress::Sync)
            .unwrap();
        assert!(block.len() < 1 << 20, "{}", block.len());
        let mut reader = HeaderReader::new();
        let error = reader.read(&block).unwrap_err();
        assert!(error.to_string().contains("beyond 64 KiB"), "{error}");
    }
}
