//! The OpenAPI document served at `/openapi.json`: `openapi.json`, with the closed sets the
//! code owns filled in from their one definition (the detectors, from
//! [`Detector::ALL`]). A test compares the served document with the router and the enum.

use std::sync::OnceLock;

use loopguard::Detector;
use serde_json::Value;

/// The document as written, before the server fills in its lists.
const TEMPLATE: &str = include_str!("openapi.json");

/// The served document (built once).
pub fn document() -> &'static str {
    static DOCUMENT: OnceLock<String> = OnceLock::new();
    DOCUMENT.get_or_init(|| build(TEMPLATE))
}

fn build(template: &str) -> String {
    // The template is part of the build and checked by the tests: it parses.
    let Ok(mut doc) = serde_json::from_str::<Value>(template) else {
        return template.to_owned();
    };
    if let Some(detector) = doc.pointer_mut("/components/schemas/Detector") {
        detector["enum"] = Detector::ALL.iter().map(|d| d.as_str()).collect();
    }
    serde_json::to_string_pretty(&doc).unwrap_or_else(|_| template.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_detector_enum_is_every_detector() {
        let doc: Value = serde_json::from_str(document()).unwrap();
        let names: Vec<&str> = doc["components"]["schemas"]["Detector"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let all: Vec<&str> = Detector::ALL.iter().map(|d| d.as_str()).collect();
        assert_eq!(names, all);
        assert_eq!(
            doc["components"]["schemas"]["CallAnswer"]["properties"]["detector"]["$ref"],
            "#/components/schemas/Detector"
        );
        // The template itself is valid JSON.
        serde_json::from_str::<Value>(TEMPLATE).unwrap();
    }
}
