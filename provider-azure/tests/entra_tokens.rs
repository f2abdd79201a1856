//! Resource Manager tokens from a Microsoft Entra ID token endpoint over TLS on loopback (a
//! self-signed certificate the provider's client is told to trust, as the ARM test server's will
//! be): the client credentials grant goes to `<authority>/<tenant>/oauth2/v2.0/token` with the
//! Resource Manager's `.default` scope, the token is reused until near its expiry (one request
//! for two tokens), refusals and outages are told apart, and neither the client secret nor the
//! token shows in an error or `Debug` output. A plain-http authority is refused before any
//! request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use provider_azure::credentials::ClientCredentials;
use provider_azure::token::{EntraTokens, TokenError, TokenSource};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const CLIENT: &str = "0b3c6e4a-1f2d-4c5b-8a9e-7d6c5b4a3f2e";
const SECRET: &str = "Qx8Q~abcDEF1234567890ghijKLMNOPqrstuvWXYZ";
const TOKEN: &str = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9.e30.c2lnbmF0dXJlLW9mLXRoZS10b2tlbg";

/// A token endpoint answering every request with (`status`, `body`), recording the requests'
/// path and form body. Returns its authority (`https://127.0.0.1:<port>`) and its CA in PEM.
async fn token_endpoint(
    status: u16,
    body: String,
    seen: Arc<Mutex<Vec<(String, String)>>>,
) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".into()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let config = ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, body, seen) = (acceptor.clone(), body.clone(), seen.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buffer = [0u8; 4096];
                let (head, length) = loop {
                    let Ok(n) = tls.read(&mut buffer).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buffer[..n]);
                    let text = String::from_utf8_lossy(&request).to_string();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|l| {
                                let (name, value) = l.split_once(':')?;
                                name.eq_ignore_ascii_case("content-length")
                                    .then(|| value.trim().parse::<usize>().ok())?
                            })
                            .unwrap_or(0);
                        break (end + 4, length);
                    }
                };
                while request.len() < head + length {
                    match tls.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buffer[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request).to_string();
                let path = text
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_string();
                seen.lock().unwrap().push((path, text[head..].to_string()));
                let response = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(response.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (format!("https://127.0.0.1:{port}"), cert.pem())
}

fn client_trusting(ca_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap()])
        .build()
        .unwrap()
}

fn credentials() -> ClientCredentials {
    ClientCredentials::new(TENANT, CLIENT, SECRET)
}

#[tokio::test]
async fn a_token_is_had_once_for_the_resource_managers_scope_and_never_shown() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let body = format!(
        r#"{{"token_type":"Bearer","expires_in":3599,"ext_expires_in":3599,"access_token":"{TOKEN}"}}"#
    );
    let (authority, ca) = token_endpoint(200, body, seen.clone()).await;
    let tokens = EntraTokens::new(
        &credentials(),
        &authority,
        "https://management.azure.com/",
        client_trusting(&ca),
    )
    .unwrap();
    let first = tokens.bearer().await.unwrap();
    let second = tokens.bearer().await.unwrap();
    assert_eq!(first.header_value(), format!("Bearer {TOKEN}"));
    assert_eq!(second.header_value(), first.header_value());
    assert!(
        first.expires_in() > Duration::from_secs(3500)
            && first.expires_in() <= Duration::from_secs(3599),
        "{:?}",
        first.expires_in()
    );
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 1, "the second token comes from the cache");
    let (path, form) = &requests[0];
    assert_eq!(path, &format!("/{TENANT}/oauth2/v2.0/token"));
    for field in [
        "grant_type=client_credentials",
        &format!("client_id={CLIENT}"),
        "scope=https%3A%2F%2Fmanagement.azure.com%2F.default",
    ] {
        assert!(form.contains(field), "{field} not in {form}");
    }
    for shown in [format!("{first:?}"), format!("{tokens:?}")] {
        assert!(!shown.contains(TOKEN) && !shown.contains(SECRET), "{shown}");
    }
}

#[tokio::test]
async fn a_refusal_and_an_outage_are_told_apart_and_say_nothing_secret() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    // As Entra ID refuses a wrong secret (this one also echoes it, which Entra does not, to show
    // that an echo would be blanked).
    let refusal = format!(
        r#"{{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided ({SECRET}).","error_codes":[7000215]}}"#
    );
    let (authority, ca) = token_endpoint(401, refusal, seen.clone()).await;
    let tokens = EntraTokens::new(
        &credentials(),
        &authority,
        "https://management.azure.com",
        client_trusting(&ca),
    )
    .unwrap();
    let error = tokens.bearer().await.unwrap_err();
    assert!(matches!(error, TokenError::Refused(_)), "{error:?}");
    assert!(
        error.to_string().contains("AADSTS7000215"),
        "Entra ID's reason reaches the user: {error}"
    );
    assert!(!error.to_string().contains(SECRET), "{error}");

    let (authority, ca) = token_endpoint(503, "{}".into(), seen.clone()).await;
    let tokens = EntraTokens::new(
        &credentials(),
        &authority,
        "https://management.azure.com",
        client_trusting(&ca),
    )
    .unwrap();
    let error = tokens.bearer().await.unwrap_err();
    assert!(matches!(error, TokenError::Unreachable(_)), "{error:?}");

    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let tokens = EntraTokens::new(
        &credentials(),
        &format!("https://127.0.0.1:{port}"),
        "https://management.azure.com",
        client_trusting(&ca),
    )
    .unwrap();
    let error = tokens.bearer().await.unwrap_err();
    assert!(matches!(error, TokenError::Unreachable(_)), "{error:?}");
    assert!(!error.to_string().contains(SECRET), "{error}");

    let error = EntraTokens::new(
        &credentials(),
        "http://127.0.0.1:1",
        "https://management.azure.com",
        reqwest::Client::new(),
    )
    .unwrap_err();
    assert!(matches!(error, TokenError::Authority(_)), "{error:?}");
}
