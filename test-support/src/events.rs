//! A `tracing` subscriber that keeps every event: its target, level and fields as text.

use std::fmt::Write;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// One recorded event: target, level, and each field's name and value (its `Debug` text).
pub type Recorded = (String, Level, Vec<(String, String)>);

/// Records every event, in order; clones share the record.
///
/// ```
/// use tollgate_test_support::events::Recorder;
/// let recorder = Recorder::default();
/// tracing::subscriber::with_default(recorder.clone(), || {
///     tracing::warn!(policy = "api", "denied");
/// });
/// assert_eq!(recorder.lines().len(), 1);
/// assert!(recorder.lines()[0].ends_with(" WARN message=denied policy=\"api\""));
/// ```
#[derive(Clone, Default)]
pub struct Recorder(pub Arc<Mutex<Vec<Recorded>>>);

impl Recorder {
    /// Each event as one line: `target LEVEL name=value ...`.
    pub fn lines(&self) -> Vec<String> {
        let events = self.0.lock().unwrap();
        events
            .iter()
            .map(|(target, level, fields)| {
                let mut line = format!("{target} {level}");
                for (name, value) in fields {
                    let _ = write!(line, " {name}={value}");
                }
                line
            })
            .collect()
    }
}

struct Fields(Vec<(String, String)>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_owned(), format!("{value:?}")));
    }
}

impl Subscriber for Recorder {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut fields = Fields(Vec::new());
        event.record(&mut fields);
        let meta = event.metadata();
        self.0
            .lock()
            .unwrap()
            .push((meta.target().to_owned(), *meta.level(), fields.0));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}
