//! A machine's bootstrap data as EC2 user data: at most 16 KB before base64 (EC2's limit).
//! cloud-init reads gzip-compressed user data, so a larger cloud-config is compressed (as CAPA
//! always does); Ignition configs are passed as they are. What is still too large is refused
//! with a message that says how large it is and what to do.

use std::io::Write;

use base64::Engine;
use capi_core::{BootstrapData, BootstrapFormat};
use flate2::Compression;
use flate2::write::GzEncoder;

/// EC2's limit on user data, before base64.
pub const MAX_USER_DATA: usize = 16 * 1024;

/// Why bootstrap data cannot be user data.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UserDataError {
    /// Larger than EC2 takes, even compressed where the format allows.
    #[error(
        "the bootstrap data ({format}) is {size} bytes{compressed}, over EC2's user data limit of \
         16384 bytes; move large files out of the KubeadmConfig (files, preKubeadmCommands) or \
         fetch them at boot"
    )]
    TooLarge {
        /// `cloud-config` or `ignition`.
        format: &'static str,
        /// Its size as it would be sent.
        size: usize,
        /// `" gzip-compressed"` when it was compressed.
        compressed: &'static str,
    },
}

/// The user data for `data`, base64-encoded as `RunInstances` takes it.
pub fn encode(data: &BootstrapData) -> Result<String, UserDataError> {
    let raw = data.expose();
    let sent = if raw.len() <= MAX_USER_DATA {
        raw.to_vec()
    } else if data.format() == BootstrapFormat::CloudConfig {
        let compressed = gzip(raw);
        if compressed.len() > MAX_USER_DATA {
            return Err(UserDataError::TooLarge {
                format: data.format().as_str(),
                size: compressed.len(),
                compressed: " gzip-compressed",
            });
        }
        compressed
    } else {
        return Err(UserDataError::TooLarge {
            format: data.format().as_str(),
            size: raw.len(),
            compressed: "",
        });
    };
    Ok(base64::engine::general_purpose::STANDARD.encode(sent))
}

pub(super) fn gzip(raw: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::best());
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(raw);
    encoder.finish().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use flate2::read::GzDecoder;

    use super::*;

    fn decode(user_data: &str) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(user_data)
            .unwrap()
    }

    #[test]
    fn small_bootstrap_data_goes_as_it_is() {
        let data = BootstrapData::new(BootstrapFormat::CloudConfig, "#cloud-config\nruncmd: []\n");
        assert_eq!(decode(&encode(&data).unwrap()), data.expose());
    }

    #[test]
    fn a_large_cloud_config_is_gzipped_and_cloud_init_gets_it_back_whole() {
        let mut text = String::from("#cloud-config\nwrite_files:\n");
        for i in 0..2000 {
            text.push_str(&format!("- path: /etc/demo/{i}\n  content: line {i}\n"));
        }
        assert!(text.len() > MAX_USER_DATA);
        let data = BootstrapData::new(BootstrapFormat::CloudConfig, text.clone());
        let sent = decode(&encode(&data).unwrap());
        assert!(sent.len() <= MAX_USER_DATA);
        assert_eq!(
            &sent[..2],
            &[0x1f, 0x8b],
            "gzip magic, which cloud-init recognises"
        );
        let mut back = String::new();
        GzDecoder::new(&sent[..]).read_to_string(&mut back).unwrap();
        assert_eq!(back, text);
    }

    #[test]
    fn what_does_not_fit_is_refused_with_its_size() {
        // Hardly compressible: pseudo-random letters and digits.
        let mut rng = fastrand::Rng::with_seed(7);
        let noise: String = (0..40_000).map(|_| rng.alphanumeric()).collect();
        let data = BootstrapData::new(BootstrapFormat::CloudConfig, noise);
        let error = encode(&data).unwrap_err();
        assert!(matches!(
            error,
            UserDataError::TooLarge {
                compressed: " gzip-compressed",
                ..
            }
        ));
        assert!(error.to_string().contains("16384"), "{error}");

        let ignition = BootstrapData::new(BootstrapFormat::Ignition, "{".repeat(MAX_USER_DATA + 1));
        let error = encode(&ignition).unwrap_err();
        assert_eq!(
            error,
            UserDataError::TooLarge {
                format: "ignition",
                size: MAX_USER_DATA + 1,
                compressed: ""
            }
        );
    }
}
