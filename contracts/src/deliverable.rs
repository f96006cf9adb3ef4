//! The one internal form of what a worker delivers, whatever its protocol:
//! HIRE outputs (`text`, `json`, `file`, `multiple`, `stream`, status `partial`), WattSwarm
//! `candidate_output` + `evidence_inline` + `evidence_refs`, and Superwire's
//! `workflow_completed` output. The `wire` module converts each protocol's shape into a
//! [`Deliverable`].
//!
//! [`Deliverable::digest`] is the only deliverable digest in hiregate: `sha256` of the RFC 8785
//! form of the [`Deliverable`]. Receipts, disputes and verification all use it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use url::Url;

use crate::canonical::{CanonicalError, Digest};

/// Most items in a `multiple` output and most evidence entries of each kind.
pub const MAX_ITEMS: usize = 64;
/// Largest inline evidence payload, bytes of `content` (WattSwarm keeps inline evidence
/// "under payload size caps"; larger evidence belongs in `evidence_refs`).
pub const MAX_INLINE_EVIDENCE_BYTES: usize = 16 * 1024;
/// Largest sum of all inline evidence payloads of one deliverable, bytes.
pub const MAX_INLINE_EVIDENCE_TOTAL_BYTES: usize = 64 * 1024;

/// Whether the worker says it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// The worker reports the work done.
    Completed,
    /// The worker stopped with only part of the work (HIRE `partial`). Judged on what it
    /// delivered; the built-in policies fail it (reason 350) unless the pinned parameters
    /// accept partial deliveries of enough items (`policy::PartialAcceptance`).
    Partial,
}

/// Why a deliverable was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DeliverableError {
    /// A `multiple` output inside a `multiple` output.
    #[error("a multiple output cannot contain another multiple output")]
    NestedMultiple,
    /// Too many items or evidence entries.
    #[error("at most {MAX_ITEMS} items per list")]
    TooManyItems,
    /// Inline evidence over the size caps.
    #[error(
        "inline evidence must be at most {MAX_INLINE_EVIDENCE_BYTES} bytes per item and \
         {MAX_INLINE_EVIDENCE_TOTAL_BYTES} bytes in all (larger evidence goes in evidence_refs)"
    )]
    InlineEvidenceTooLarge,
    /// A `multiple` output with no items, or a completion with no output at all.
    #[error("the deliverable is empty")]
    Empty,
    /// A file URL that is not http(s).
    #[error("file and stream URLs must be http or https, got {0:?}")]
    UnsupportedUrlScheme(String),
}

/// Format of a streamed output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamFormat {
    /// Server-Sent Events.
    Sse,
}

/// A file delivered by URL (HIRE `file`, or an entry of HIRE `deliverables`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileOutput {
    /// Where the worker hosts the file.
    pub url: Url,
    /// Media type, when declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime: Option<String>,
    /// Declared size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Declared `sha256:` digest of the file bytes; checked after fetching.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<Digest>,
    /// File name (HIRE `deliverables[].name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl FileOutput {
    fn is_json(&self) -> bool {
        self.mime.as_deref().is_some_and(|mime| {
            let essence = mime.split(';').next().unwrap_or("").trim();
            essence.eq_ignore_ascii_case("application/json") || essence.ends_with("+json")
        })
    }

    fn is_text(&self) -> bool {
        self.mime
            .as_deref()
            .is_some_and(|mime| mime.trim().to_ascii_lowercase().starts_with("text/"))
    }
}

/// One output, in HIRE's `output` shape (`{"type": "...", ...}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", try_from = "OutputWire")]
pub enum Output {
    /// Plain text, inline.
    Text {
        /// The text.
        content: String,
    },
    /// Structured data, inline; this is what output schemas usually constrain.
    Json {
        /// The JSON value.
        content: Value,
    },
    /// A file by URL.
    File(FileOutput),
    /// Several outputs (not nested).
    Multiple {
        /// The outputs.
        items: Vec<Output>,
    },
    /// Incremental output by URL.
    Stream {
        /// Where to connect.
        url: Url,
        /// Stream format.
        format: StreamFormat,
    },
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum OutputWire {
    Text { content: String },
    Json { content: Value },
    File(FileOutput),
    Multiple { items: Vec<Output> },
    Stream { url: Url, format: StreamFormat },
}

fn check_http(url: &Url) -> Result<(), DeliverableError> {
    match url.scheme() {
        "http" | "https" => Ok(()),
        other => Err(DeliverableError::UnsupportedUrlScheme(other.to_owned())),
    }
}

impl TryFrom<OutputWire> for Output {
    type Error = DeliverableError;
    fn try_from(wire: OutputWire) -> Result<Self, Self::Error> {
        let output = match wire {
            OutputWire::Text { content } => Self::Text { content },
            OutputWire::Json { content } => Self::Json { content },
            OutputWire::File(file) => Self::File(file),
            OutputWire::Multiple { items } => Self::Multiple { items },
            OutputWire::Stream { url, format } => Self::Stream { url, format },
        };
        output.check()?;
        Ok(output)
    }
}

impl Output {
    fn check(&self) -> Result<(), DeliverableError> {
        match self {
            Self::File(file) => check_http(&file.url),
            Self::Stream { url, .. } => check_http(url),
            Self::Multiple { items } => {
                if items.is_empty() {
                    return Err(DeliverableError::Empty);
                }
                if items.len() > MAX_ITEMS {
                    return Err(DeliverableError::TooManyItems);
                }
                if items
                    .iter()
                    .any(|item| matches!(item, Self::Multiple { .. }))
                {
                    return Err(DeliverableError::NestedMultiple);
                }
                items.iter().try_for_each(Self::check)
            }
            Self::Text { .. } | Self::Json { .. } => Ok(()),
        }
    }

    /// The value schemas and thresholds are evaluated against.
    ///
    /// `text` is a JSON string; `json` is its content; a `file` with a JSON media type is its
    /// parsed bytes and a `text/*` file its UTF-8 text (both need the fetched bytes, keyed by
    /// URL in `content`), any other
    /// file is its descriptor `{"type":"file","url",…}`; a `stream` is its descriptor;
    /// `multiple` is the array of its items' subjects.
    pub(crate) fn subject(&self, content: &BTreeMap<String, Vec<u8>>) -> Subject {
        match self {
            Self::Text { content } => Subject::Ready(Value::String(content.clone())),
            Self::Json { content } => Subject::Ready(content.clone()),
            Self::File(file) if file.is_json() || file.is_text() => {
                match content.get(file.url.as_str()) {
                    None => Subject::Unavailable,
                    Some(bytes) if file.is_json() => match serde_json::from_slice(bytes) {
                        Ok(value) => Subject::Ready(value),
                        Err(error) => Subject::Invalid(format!(
                            "file {} is declared JSON but does not parse: {error}",
                            file.url
                        )),
                    },
                    Some(bytes) => match std::str::from_utf8(bytes) {
                        Ok(text) => Subject::Ready(Value::String(text.to_owned())),
                        Err(_) => Subject::Invalid(format!(
                            "file {} is declared text but is not UTF-8",
                            file.url
                        )),
                    },
                }
            }
            Self::File(file) => Subject::Ready(
                serde_json::to_value(Self::File(file.clone())).unwrap_or(Value::Null),
            ),
            Self::Stream { url, format } => {
                Subject::Ready(json!({"type": "stream", "url": url, "format": format}))
            }
            Self::Multiple { items } => {
                let mut values = Vec::with_capacity(items.len());
                for item in items {
                    match item.subject(content) {
                        Subject::Ready(value) => values.push(value),
                        other => return other,
                    }
                }
                Subject::Ready(Value::Array(values))
            }
        }
    }

    fn collect_urls<'a>(&'a self, out: &mut Vec<&'a Url>) {
        match self {
            Self::File(file) => out.push(&file.url),
            Self::Stream { url, .. } => out.push(url),
            Self::Multiple { items } => items.iter().for_each(|item| item.collect_urls(out)),
            Self::Text { .. } | Self::Json { .. } => {}
        }
    }

    /// How many items this output holds: a `multiple` output's items, else one. What
    /// partial acceptance counts.
    #[must_use]
    pub fn item_count(&self) -> usize {
        match self {
            Self::Multiple { items } => items.len(),
            _ => 1,
        }
    }

    fn collect_files<'a>(&'a self, out: &mut Vec<&'a FileOutput>) {
        match self {
            Self::File(file) => out.push(file),
            Self::Multiple { items } => items.iter().for_each(|item| item.collect_files(out)),
            _ => {}
        }
    }
}

/// What the verification subject of an output is.
pub(crate) enum Subject {
    Ready(Value),
    /// Needs fetched bytes that are not available.
    Unavailable,
    /// The fetched bytes do not match the declared media type.
    Invalid(String),
}

/// A small evidence payload carried inline (WattSwarm `evidence_inline`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InlineEvidence {
    /// Media type.
    pub mime: String,
    /// The payload.
    pub content: String,
}

/// A reference to an external artifact with its digest (WattSwarm `ArtifactRef`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRef {
    /// Where the artifact is.
    pub uri: Url,
    /// `sha256:` digest of its bytes.
    pub digest: Digest,
    /// Declared size.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// Media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime: Option<String>,
    /// Creation time, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<u64>,
    /// Who produced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub producer: Option<String>,
}

/// Something the gateway must fetch (size-limited) before verification, and the digest the
/// bytes must have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvidenceRequest {
    /// What to fetch.
    pub uri: Url,
    /// The digest the bytes must hash to, when the worker declared one.
    pub expected_digest: Option<Digest>,
    /// The size the worker declared.
    pub declared_size: Option<u64>,
}

/// What a worker delivered, in one form for every protocol.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, try_from = "DeliverableWire")]
pub struct Deliverable {
    status: DeliveryStatus,
    output: Output,
    evidence_inline: Vec<InlineEvidence>,
    evidence_refs: Vec<ArtifactRef>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeliverableWire {
    status: DeliveryStatus,
    output: Output,
    #[serde(default)]
    evidence_inline: Vec<InlineEvidence>,
    #[serde(default)]
    evidence_refs: Vec<ArtifactRef>,
}

impl TryFrom<DeliverableWire> for Deliverable {
    type Error = DeliverableError;
    fn try_from(wire: DeliverableWire) -> Result<Self, Self::Error> {
        Self::new(
            wire.status,
            wire.output,
            wire.evidence_inline,
            wire.evidence_refs,
        )
    }
}

impl Deliverable {
    /// A deliverable; checks list sizes and URL schemes.
    pub fn new(
        status: DeliveryStatus,
        output: Output,
        evidence_inline: Vec<InlineEvidence>,
        evidence_refs: Vec<ArtifactRef>,
    ) -> Result<Self, DeliverableError> {
        output.check()?;
        if evidence_inline.len() > MAX_ITEMS || evidence_refs.len() > MAX_ITEMS {
            return Err(DeliverableError::TooManyItems);
        }
        let sizes = evidence_inline.iter().map(|item| item.content.len());
        if sizes.clone().any(|size| size > MAX_INLINE_EVIDENCE_BYTES)
            || sizes.sum::<usize>() > MAX_INLINE_EVIDENCE_TOTAL_BYTES
        {
            return Err(DeliverableError::InlineEvidenceTooLarge);
        }
        Ok(Self {
            status,
            output,
            evidence_inline,
            evidence_refs,
        })
    }

    /// A completed deliverable with one output and no evidence.
    pub fn completed(output: Output) -> Result<Self, DeliverableError> {
        Self::new(DeliveryStatus::Completed, output, Vec::new(), Vec::new())
    }

    /// Completed, or partial.
    #[must_use]
    pub const fn status(&self) -> DeliveryStatus {
        self.status
    }
    /// The output.
    #[must_use]
    pub const fn output(&self) -> &Output {
        &self.output
    }
    /// Inline evidence.
    #[must_use]
    pub fn evidence_inline(&self) -> &[InlineEvidence] {
        &self.evidence_inline
    }
    /// Evidence references.
    #[must_use]
    pub fn evidence_refs(&self) -> &[ArtifactRef] {
        &self.evidence_refs
    }

    /// THE deliverable digest: `sha256` of the RFC 8785 form of this deliverable.
    pub fn digest(&self) -> Result<Digest, CanonicalError> {
        Digest::of_canonical(self)
    }

    /// Every URL the deliverable names (files, streams, evidence artifacts), in order of
    /// appearance: what a seeker or the gateway would have to call.
    #[must_use]
    pub fn urls(&self) -> Vec<&Url> {
        let mut urls = Vec::new();
        self.output.collect_urls(&mut urls);
        urls.extend(self.evidence_refs.iter().map(|artifact| &artifact.uri));
        urls
    }

    /// Every file and evidence artifact to fetch before verification, once per URL, in order
    /// of appearance.
    #[must_use]
    pub fn evidence_requests(&self) -> Vec<EvidenceRequest> {
        let mut files = Vec::new();
        self.output.collect_files(&mut files);
        let mut requests: Vec<EvidenceRequest> = Vec::new();
        let candidates = files
            .into_iter()
            .map(|file| EvidenceRequest {
                uri: file.url.clone(),
                expected_digest: file.checksum,
                declared_size: file.size,
            })
            .chain(self.evidence_refs.iter().map(|artifact| EvidenceRequest {
                uri: artifact.uri.clone(),
                expected_digest: Some(artifact.digest),
                declared_size: artifact.size_bytes,
            }));
        for request in candidates {
            match requests.iter_mut().find(|known| known.uri == request.uri) {
                // The same URL twice with two digests: keep both checks by keeping the first
                // declared digest and letting a different second one surface as a mismatch.
                Some(known) if known.expected_digest.is_none() => {
                    known.expected_digest = request.expected_digest;
                }
                Some(known)
                    if request.expected_digest.is_some()
                        && known.expected_digest != request.expected_digest =>
                {
                    requests.push(request);
                }
                Some(_) => {}
                None => requests.push(request),
            }
        }
        requests
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest_of(text: &str) -> Digest {
        Digest::of_bytes(text.as_bytes())
    }

    #[test]
    fn hire_output_shapes_parse() {
        let text: Output =
            serde_json::from_value(json!({"type": "text", "content": "Looks good"})).unwrap();
        assert_eq!(
            text,
            Output::Text {
                content: "Looks good".to_owned()
            }
        );
        let multiple: Output = serde_json::from_value(json!({
            "type": "multiple",
            "items": [
                {"type": "file", "url": "https://cdn.example.com/a.svg", "mime": "image/svg+xml"},
                {"type": "json", "content": {"notes": "Option 1 is recommended"}}
            ]
        }))
        .unwrap();
        assert!(matches!(multiple, Output::Multiple { ref items } if items.len() == 2));
        let stream: Output = serde_json::from_value(
            json!({"type": "stream", "url": "https://w.example.com/stream/1", "format": "sse"}),
        )
        .unwrap();
        assert!(matches!(stream, Output::Stream { .. }));
    }

    #[test]
    fn malformed_outputs_are_refused() {
        for bad in [
            json!({"type": "multiple", "items": []}),
            json!({"type": "multiple", "items": [{"type": "multiple", "items": [{"type": "text", "content": "x"}]}]}),
            json!({"type": "file", "url": "file:///etc/passwd"}),
            json!({"type": "file", "url": "https://x.example/a", "checksum": "md5:1"}),
            json!({"type": "video", "url": "https://x.example/a"}),
            json!({"type": "text", "content": "x", "extra": 1}),
        ] {
            assert!(
                serde_json::from_value::<Output>(bad.clone()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn digest_ignores_json_spelling_but_not_content() {
        let a: Deliverable = serde_json::from_str(
            r#"{"status":"completed","output":{"type":"json","content":{"b":1.0,"a":[1,2]}}}"#,
        )
        .unwrap();
        let b: Deliverable = serde_json::from_str(
            r#"{ "output" : { "content" : { "a" : [ 1 , 2 ] , "b" : 1 } , "type" : "json" } , "status" : "completed" , "evidence_refs": [] }"#,
        )
        .unwrap();
        assert_eq!(a.digest().unwrap(), b.digest().unwrap());
        let c: Deliverable = serde_json::from_str(
            r#"{"status":"partial","output":{"type":"json","content":{"b":1.0,"a":[1,2]}}}"#,
        )
        .unwrap();
        assert_ne!(a.digest().unwrap(), c.digest().unwrap());
    }

    #[test]
    fn evidence_requests_cover_files_and_artifacts_once() {
        let file_url: Url = "https://cdn.example.com/report.json".parse().unwrap();
        let deliverable = Deliverable::new(
            DeliveryStatus::Completed,
            Output::Multiple {
                items: vec![
                    Output::File(FileOutput {
                        url: file_url.clone(),
                        mime: Some("application/json".to_owned()),
                        size: Some(10),
                        checksum: Some(digest_of("x")),
                        name: None,
                    }),
                    Output::Text {
                        content: "see file".to_owned(),
                    },
                ],
            },
            vec![],
            vec![
                ArtifactRef {
                    uri: "https://runtime.local/trace".parse().unwrap(),
                    digest: digest_of("trace"),
                    size_bytes: None,
                    mime: None,
                    created_at: None,
                    producer: None,
                },
                ArtifactRef {
                    uri: file_url.clone(),
                    digest: digest_of("x"),
                    size_bytes: None,
                    mime: None,
                    created_at: None,
                    producer: None,
                },
            ],
        )
        .unwrap();
        let requests = deliverable.evidence_requests();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0].uri, file_url);
        assert_eq!(requests[0].expected_digest, Some(digest_of("x")));
    }
}
