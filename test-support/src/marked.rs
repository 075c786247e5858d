//! The generated sections of the docs: the text a program writes between a pair of markers,
//! `<!-- NAME:begin (written by `COMMAND`) -->` and `<!-- NAME:end -->`, so that the figures
//! in a document are one run's and say which command wrote them.

/// Replaces what lies between the `name` markers of the file at `path` with `body` (its
/// trailing white space trimmed, one newline after it). `command` is the one the begin marker
/// names: the file must already hold both markers, the begin marker exactly so.
///
/// ```
/// let path = std::env::temp_dir().join(format!("marked-{}.md", std::process::id()));
/// let begin = "<!-- t:begin (written by `make t`) -->\n";
/// std::fs::write(&path, format!("# Doc\n{begin}old\n<!-- t:end -->\n")).unwrap();
/// tollgate_test_support::marked::replace(path.to_str().unwrap(), "t", "make t", "new\n").unwrap();
/// let text = std::fs::read_to_string(&path).unwrap();
/// assert_eq!(text, format!("# Doc\n{begin}new\n<!-- t:end -->\n"));
/// # std::fs::remove_file(&path).unwrap();
/// ```
pub fn replace(path: &str, name: &str, command: &str, body: &str) -> std::io::Result<()> {
    let begin = format!("<!-- {name}:begin (written by `{command}`) -->\n");
    let end = format!("<!-- {name}:end -->");
    let text = std::fs::read_to_string(path)?;
    let missing = || std::io::Error::other(format!("{path}: no {name}:begin / {name}:end markers"));
    let start = text.find(&begin).ok_or_else(missing)? + begin.len();
    let stop = start + text[start..].find(&end).ok_or_else(missing)?;
    let body = body.trim_end();
    std::fs::write(path, format!("{}{body}\n{}", &text[..start], &text[stop..]))
}

/// What a program printed, kept to be written into a document afterwards with [`replace`].
///
/// ```
/// use tollgate_test_support::marked::Transcript;
/// static OUT: Transcript = Transcript::new();
/// OUT.line("one");
/// OUT.line("two");
/// assert_eq!(OUT.text(), "one\ntwo\n");
/// ```
#[derive(Default)]
pub struct Transcript(std::sync::Mutex<String>);

impl Transcript {
    /// An empty transcript (for a `static`).
    pub const fn new() -> Transcript {
        Transcript(std::sync::Mutex::new(String::new()))
    }

    /// Prints `line` and keeps it.
    pub fn line(&self, line: &str) {
        println!("{line}");
        let mut text = self.0.lock().unwrap_or_else(|e| e.into_inner());
        text.push_str(line);
        text.push('\n');
    }

    /// Everything kept so far.
    pub fn text(&self) -> String {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
