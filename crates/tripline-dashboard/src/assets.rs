//! The page, compiled into the binary: no build step, nothing fetched from elsewhere.

pub(crate) const INDEX_HTML: &str = include_str!("assets/index.html");
const BOOT_JS: &str = include_str!("assets/boot.js");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// An asset by file name, with its content type.
pub(crate) fn get(name: &str) -> Option<(&'static str, &'static str)> {
    match name {
        "boot.js" => Some((BOOT_JS, "text/javascript; charset=utf-8")),
        "app.js" => Some((APP_JS, "text/javascript; charset=utf-8")),
        "app.css" => Some((APP_CSS, "text/css; charset=utf-8")),
        _ => None,
    }
}
