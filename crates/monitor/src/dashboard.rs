//! The web dashboard: one HTML page, a script and a style sheet, compiled into the
//! binary with `include_str!`. The page polls `/api/dashboard` (JSON) once a second and
//! draws rates, latency percentiles and queue depths over time as inline SVG.

use crate::http::Response;

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/dashboard.js");
const STYLE: &str = include_str!("assets/dashboard.css");

/// The dashboard file at `path`, if it is one.
pub fn asset(path: &str) -> Option<Response> {
    let (content_type, body) = match path {
        "/" | "/index.html" => ("text/html; charset=utf-8", INDEX),
        "/dashboard.js" => ("text/javascript; charset=utf-8", SCRIPT),
        "/dashboard.css" => ("text/css; charset=utf-8", STYLE),
        _ => return None,
    };
    Some(Response::with(200, content_type, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_only_embedded_files() {
        let page = String::from_utf8(asset("/").unwrap().body).unwrap();
        assert!(page.contains("dashboard.js") && page.contains("dashboard.css"));
        assert!(!page.contains("http://") && !page.contains("https://"));
        assert!(asset("/dashboard.js").is_some() && asset("/nope").is_none());
    }
}
