//! The one HTTP/1.1 client of Migratory's programs and tests: a world server reading its
//! content from the fleet, the Agones SDK calls, the fleet polling `/status`, the bots
//! and the soak reading `/metrics`. Every peer is plain HTTP on a known address (loopback,
//! a pod's sidecar, a fleet's internal API), so this is hyper's HTTP/1 connection over
//! one TCP stream per request: no pool, no TLS, no proxy lookup.

use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::header::{HeaderValue, AUTHORIZATION, CONNECTION, CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use thiserror::Error;

pub use hyper::Method;

/// How long a request may take when its caller names no other bound.
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// Why a request got no answer.
#[derive(Debug, Error)]
pub enum HttpError {
    #[error("`{url}` is not an http://HOST[:PORT][/PATH] URL")]
    Url { url: String },
    #[error("connecting to {authority}: {source}")]
    Connect {
        authority: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{method} {url}: {source}")]
    Exchange {
        method: Method,
        url: String,
        #[source]
        source: hyper::Error,
    },
    #[error("{method} {url}: building the request: {source}")]
    Request {
        method: Method,
        url: String,
        #[source]
        source: hyper::http::Error,
    },
    #[error("{method} {url}: no answer within {after:?}")]
    Timeout {
        method: Method,
        url: String,
        after: Duration,
    },
}

/// An answer: its status and whole body.
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub body: Bytes,
}

impl Response {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON of type `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

/// One request to make.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: Method,
    /// `http://HOST[:PORT][/PATH]`.
    pub url: String,
    /// Sent as `Authorization: Bearer TOKEN`.
    pub bearer: Option<String>,
    /// The body, sent with `Content-Type: content_type`.
    pub body: Option<Vec<u8>>,
    pub content_type: &'static str,
    pub timeout: Duration,
}

impl Request {
    pub fn new(method: Method, url: impl Into<String>) -> Request {
        Request {
            method,
            url: url.into(),
            bearer: None,
            body: None,
            content_type: "application/json",
            timeout: TIMEOUT_DEFAULT,
        }
    }

    pub fn bearer(mut self, token: impl Into<String>) -> Request {
        self.bearer = Some(token.into());
        self
    }

    pub fn json_body(mut self, body: &serde_json::Value) -> Request {
        self.body = Some(body.to_string().into_bytes());
        self.content_type = "application/json";
        self
    }

    /// A body of raw bytes (`application/octet-stream`).
    pub fn octet_body(mut self, body: Vec<u8>) -> Request {
        self.body = Some(body);
        self.content_type = "application/octet-stream";
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Request {
        self.timeout = timeout;
        self
    }

    /// Sends the request and reads the whole answer. Must run inside a tokio runtime.
    pub async fn send(self) -> Result<Response, HttpError> {
        let (method, url, timeout) = (self.method.clone(), self.url.clone(), self.timeout);
        match tokio::time::timeout(timeout, self.exchange()).await {
            Ok(r) => r,
            Err(_) => Err(HttpError::Timeout {
                method,
                url,
                after: timeout,
            }),
        }
    }

    async fn exchange(self) -> Result<Response, HttpError> {
        let (authority, path) = split_url(&self.url).ok_or_else(|| HttpError::Url {
            url: self.url.clone(),
        })?;
        let exchange_err = |source| HttpError::Exchange {
            method: self.method.clone(),
            url: self.url.clone(),
            source,
        };
        let connect = if authority.contains(':') && !authority.ends_with(']') {
            tokio::net::TcpStream::connect(authority).await
        } else {
            tokio::net::TcpStream::connect((authority.trim_matches(['[', ']']), 80)).await
        };
        let stream = connect.map_err(|source| HttpError::Connect {
            authority: authority.to_string(),
            source,
        })?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(exchange_err)?;
        let driver = tokio::spawn(connection);
        let mut request = hyper::Request::builder()
            .method(self.method.clone())
            .uri(path)
            .header(HOST, authority)
            .header(CONNECTION, HeaderValue::from_static("close"));
        if let Some(token) = &self.bearer {
            request = request.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        if self.body.is_some() {
            request = request.header(CONTENT_TYPE, HeaderValue::from_static(self.content_type));
        }
        let request = request
            .body(Full::new(Bytes::from(self.body.unwrap_or_default())))
            .map_err(|source| HttpError::Request {
                method: self.method.clone(),
                url: self.url.clone(),
                source,
            })?;
        let answer = async {
            let response = sender.send_request(request).await?;
            let status = response.status().as_u16();
            let body = response.into_body().collect().await?.to_bytes();
            Ok(Response { status, body })
        }
        .await
        .map_err(exchange_err);
        driver.abort();
        answer
    }
}

/// `GET url` with the default timeout.
pub async fn get(url: &str) -> Result<Response, HttpError> {
    Request::new(Method::GET, url).send().await
}

/// (`HOST[:PORT]`, `/PATH`) of an `http://` URL.
fn split_url(url: &str) -> Option<(&str, &str)> {
    let rest = url.strip_prefix("http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    (!authority.is_empty()).then_some((authority, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_authority_and_path() {
        assert_eq!(
            split_url("http://127.0.0.1:7400/metrics"),
            Some(("127.0.0.1:7400", "/metrics"))
        );
        assert_eq!(split_url("http://h:1"), Some(("h:1", "/")));
        assert_eq!(split_url("http://[::1]:9/a?b=c"), Some(("[::1]:9", "/a?b=c")));
        assert_eq!(split_url("https://h/"), None);
        assert_eq!(split_url("http:///x"), None);
    }

    #[test]
    fn a_request_reads_status_and_body_and_sends_its_headers() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = listener.local_addr().expect("addr");
            let server = tokio::spawn(async move {
                let (mut s, _) = listener.accept().await.expect("accept");
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") || !head.ends_with(b"{\"a\":1}") {
                    let n = s.read(&mut buf).await.expect("read");
                    assert!(
                        n > 0,
                        "the request ended early: {:?}",
                        String::from_utf8_lossy(&head)
                    );
                    head.extend_from_slice(&buf[..n]);
                }
                s.write_all(b"HTTP/1.1 418 I'm a teapot\r\ncontent-length: 5\r\n\r\nshort")
                    .await
                    .expect("write");
                String::from_utf8(head).expect("utf-8")
            });
            let response = Request::new(Method::PUT, format!("http://{addr}/x"))
                .bearer("t0k")
                .json_body(&serde_json::json!({"a": 1}))
                .send()
                .await
                .expect("answer");
            assert_eq!((response.status, response.text().as_str()), (418, "short"));
            assert!(!response.is_success());
            let head = server.await.expect("server").to_ascii_lowercase();
            assert!(head.starts_with("put /x http/1.1\r\n"), "{head}");
            for line in [
                "authorization: bearer t0k",
                "content-type: application/json",
                "host: 127.0.0.1",
            ] {
                assert!(head.contains(line), "{line} missing from {head}");
            }
        });
    }

    #[test]
    fn an_unreachable_peer_is_a_connect_error() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        // Bind, learn the port, close: nothing listens there now.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port");
        let err = runtime
            .block_on(get(&format!("http://{addr}/")))
            .expect_err("no server");
        assert!(matches!(err, HttpError::Connect { .. }), "{err}");
    }
}
