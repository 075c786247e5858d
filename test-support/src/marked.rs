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
