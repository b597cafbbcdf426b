//! Browser access (CORS): which origins a web page may call the node from. A browser sends
//! a preflight `OPTIONS` before a cross-origin JSON-RPC `POST`, and reads the answer only if
//! the response names its origin; without an allowed origin the node sends no CORS headers
//! and browsers refuse every cross-origin call (the default off `--dev`).

use http::{HeaderValue, Method, header};
use tower_http::cors::{AllowOrigin, Any, CorsLayer};

/// Why an allowed origin cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an origin (`*`, or scheme://host[:port] such as http://localhost:3000)")]
pub struct BadOrigin(pub String);

/// The CORS layer for `origins` (`*` for any, else exact origins); `None` for none.
pub fn layer(origins: &[String]) -> Result<Option<CorsLayer>, BadOrigin> {
    if origins.is_empty() {
        return Ok(None);
    }
    let allow = if origins.iter().any(|origin| origin == "*") {
        AllowOrigin::from(Any)
    } else {
        let values = origins
            .iter()
            .map(|origin| origin_value(origin))
            .collect::<Result<Vec<_>, _>>()?;
        AllowOrigin::list(values)
    };
    Ok(Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods([Method::POST, Method::GET, Method::OPTIONS])
            .allow_headers([header::CONTENT_TYPE]),
    ))
}

/// Refuses an origin the layer could not use; `*` passes.
pub fn check(origins: &[String]) -> Result<(), BadOrigin> {
    layer(origins).map(|_| ())
}

/// `origin` as a header value, if it looks like `scheme://host[:port]`.
fn origin_value(origin: &str) -> Result<HeaderValue, BadOrigin> {
    let bad = || BadOrigin(origin.to_owned());
    let (scheme, rest) = origin.split_once("://").ok_or_else(bad)?;
    if scheme.is_empty() || rest.is_empty() || rest.contains('/') {
        return Err(bad());
    }
    HeaderValue::from_str(origin).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_are_a_star_or_scheme_and_host() {
        let list = |origins: &[&str]| origins.iter().map(|o| o.to_string()).collect::<Vec<_>>();
        assert!(layer(&[]).expect("none").is_none());
        assert!(layer(&list(&["*"])).expect("any").is_some());
        assert!(layer(&list(&["http://localhost:3000", "https://app.example"])).is_ok());
        for bad in ["localhost:3000", "http://", "http://a/path", "http://a\nb"] {
            assert_eq!(
                check(&list(&[bad])),
                Err(BadOrigin(bad.to_owned())),
                "{bad}"
            );
        }
    }
}
