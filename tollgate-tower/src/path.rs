//! Route matching on a normalized path, so that a request cannot reach a route's upstream
//! under a spelling the route's policy does not match.
//!
//! Upstreams differ in what they do with a path before routing: some merge slashes (`//login`),
//! decode percent-escapes (`/%6Cogin`, even twice: `/%256Cogin`), resolve dot segments
//! (`/a/../login`), drop path parameters (`/login;jsessionid=1`), read `\` as `/`, or ignore
//! case. The layer matches routes on the path with all of these applied, so each of those
//! spellings gets the route's policy whatever the upstream does. A path that only a lenient
//! upstream would route to the route is limited as the route, which for an upstream that
//! does not route it (a `404`) costs nothing but the count.

use std::borrow::Cow;

/// `path` normalized for matching: percent-escapes decoded until none is left, `\` read as
/// `/`, ASCII lowercased, `;` parameters dropped from each segment, empty and `.` segments
/// dropped, `..` removing the segment before it. Always starts with `/`; no trailing `/`
/// except for the root. Borrowed when `path` is already in that form.
pub(crate) fn normalize(path: &str) -> Cow<'_, str> {
    if is_plain(path.as_bytes()) {
        return Cow::Borrowed(path);
    }
    let mut bytes = path.as_bytes().to_vec();
    // Each pass that changes anything shortens the path: this ends.
    while bytes.contains(&b'%') {
        let decoded = decode_once(&bytes);
        if decoded.len() == bytes.len() {
            break;
        }
        bytes = decoded;
    }
    let mut segments: Vec<Vec<u8>> = Vec::new();
    for segment in bytes.split(|&b| b == b'/' || b == b'\\') {
        let segment = match segment.iter().position(|&b| b == b';') {
            Some(i) => &segment[..i],
            None => segment,
        };
        match segment {
            b"" | b"." => {}
            b".." => {
                segments.pop();
            }
            s => segments.push(s.to_ascii_lowercase()),
        }
    }
    let mut out = Vec::with_capacity(bytes.len() + 1);
    for s in &segments {
        out.push(b'/');
        out.extend_from_slice(s);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    Cow::Owned(String::from_utf8_lossy(&out).into_owned())
}

/// Whether `path` is already normalized: starts with `/`, only lowercase letters, digits and
/// `-_~.!$&'()*+,=:@` in segments, no empty, `.` or `..` segment, no trailing `/` (but `/`).
#[inline]
fn is_plain(path: &[u8]) -> bool {
    let [b'/', rest @ ..] = path else {
        return false;
    };
    if rest.is_empty() {
        return true;
    }
    rest.split(|&b| b == b'/').all(|segment| {
        !matches!(segment, b"" | b"." | b"..")
            && segment.iter().all(|&b| {
                b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || matches!(
                        b,
                        b'-' | b'_'
                            | b'~'
                            | b'.'
                            | b'!'
                            | b'$'
                            | b'&'
                            | b'\''
                            | b'('
                            | b')'
                            | b'*'
                            | b'+'
                            | b','
                            | b'='
                            | b':'
                            | b'@'
                    )
            })
    })
}

/// One pass of percent-decoding; a `%` not followed by two hex digits stays as it is.
fn decode_once(bytes: &[u8]) -> Vec<u8> {
    let hex = |b: u8| (b as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(h), Some(l)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            )
        {
            out.push(h << 4 | l);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// Whether the normalized `path` is the normalized route `prefix` or lies below it.
#[inline]
pub(crate) fn under(path: &str, prefix: &str) -> bool {
    path.strip_prefix(prefix)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || prefix.ends_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_of_one_path_normalize_alike() {
        for p in [
            "/login",
            "//login",
            "/%6Cogin",
            "/%6cogin",
            "/%256Cogin",
            "/LOGIN",
            "/./login",
            "/x/../login",
            "/login/",
            "/login;jsessionid=1",
            "\\login",
            "/%2Flogin",
            "/%2e/login",
            "/%2e%2e/login",
            "/../login",
        ] {
            assert_eq!(normalize(p), "/login", "{p:?}");
        }
        assert_eq!(normalize("/api/v1/Users/7"), "/api/v1/users/7");
        assert_eq!(normalize(""), "/");
        assert_eq!(normalize("/"), "/");
        assert_eq!(normalize("/%zz%4"), "/%zz%4");
        assert_eq!(normalize("/%ff"), "/\u{fffd}");
        assert!(matches!(normalize("/a/b-c.d"), Cow::Borrowed(_)));
    }

    #[test]
    fn prefixes_match_whole_segments() {
        assert!(under("/login", "/login"));
        assert!(under("/login/x", "/login"));
        assert!(!under("/logins", "/login"));
        assert!(under("/anything", "/"));
    }
}
