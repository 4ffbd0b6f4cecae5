//! The decoders' entry points for the fuzz targets (feature `fuzzing`): not part of the API,
//! and may change in any release.

/// Parses a reply of the breaker's functions as a call does; `Some` with the reply's fields
/// (verdict, state, epoch, open deadline, now, expired, origin, notes, the verdict's fields,
/// and each transition as `from>to>reason@epoch`) when it is well-formed.
pub fn parse_reply(raw: Vec<redis::Value>) -> Option<Vec<String>> {
    let r = crate::store::Reply::parse(raw).ok()?;
    Some(r.summary())
}

/// Reads `INFO` output as [`SharedBreaker::check`](crate::SharedBreaker::check) does.
pub fn parse_info(info: &str) -> crate::Health {
    crate::Health::from_info(info)
}
