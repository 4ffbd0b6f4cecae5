//! Hostile TOML documents: a seed document (a real configuration) with a few of its values
//! replaced by hostile ones (another type, an extreme, a duration of 0 or of 600 years, text
//! with control characters), keys removed or added. Shared by the property tests of every
//! crate that reads TOML and by the fuzz targets (`fuzz/`), which include this file.

use arbitrary::{Result, Unstructured};
use toml::{Table, Value};

/// A value a careless or hostile hand might write where any value goes.
pub(crate) fn hostile_value(u: &mut Unstructured<'_>, words: &[&str]) -> Result<Value> {
    const INTS: [i64; 12] = [
        0,
        1,
        -1,
        2,
        20,
        100,
        4096,
        1_000_000,
        u32::MAX as i64,
        u32::MAX as i64 + 1,
        i64::MAX,
        i64::MIN,
    ];
    const FLOATS: [f64; 12] = [
        0.0,
        -0.0,
        1e-300,
        0.1,
        50.0,
        66.666_666_666_666_67,
        99.999_999_999,
        100.0,
        100.000_000_000_001,
        f64::NAN,
        f64::INFINITY,
        -1.0,
    ];
    const UNITS: [&str; 12] = [
        "ns", "us", "ms", "s", "m", "min", "h", "d", "w", "M", "y", "sec",
    ];
    const NUMBERS: [&str; 8] = [
        "0",
        "1",
        "7",
        "250",
        "1000",
        "604800",
        "18446744073709551615",
        "99999999999999999999",
    ];
    Ok(match u.int_in_range(0..=11)? {
        0 => Value::Integer(*u.choose(&INTS)?),
        1 => Value::Integer(u.arbitrary::<i64>()?),
        2 => Value::Float(*u.choose(&FLOATS)?),
        3 => Value::Float(u.arbitrary::<f64>()?),
        4 => Value::Boolean(u.arbitrary::<bool>()?),
        5 | 6 => {
            let n = u.choose(&NUMBERS)?;
            let unit = u.choose(&UNITS)?;
            let mut s = format!("{n}{unit}");
            if u.ratio(1, 4)? {
                s.push_str(&format!(" {}{}", u.choose(&NUMBERS)?, u.choose(&UNITS)?));
            }
            Value::String(s)
        }
        7 | 8 if !words.is_empty() => Value::String(u.choose(words)?.to_string()),
        9 => Value::String(u.arbitrary::<String>()?),
        10 => Value::Array(vec![hostile_leaf(u)?, hostile_leaf(u)?]),
        _ => Value::String(
            [
                "",
                " ",
                "\u{feff}",
                "a\tb",
                "\u{202e}x",
                "x".repeat(300).as_str(),
            ][u.int_in_range(0..=5)?]
            .to_string(),
        ),
    })
}

fn hostile_leaf(u: &mut Unstructured<'_>) -> Result<Value> {
    Ok(match u.int_in_range(0..=3)? {
        0 => Value::Integer(u.arbitrary::<i64>()?),
        1 => Value::Float(u.arbitrary::<f64>()?),
        2 => Value::String(format!("{}ms", u.int_in_range(0..=10_000u32)?)),
        _ => Value::String(u.arbitrary::<String>()?),
    })
}

/// Every path to a value of `t` (tables and arrays of tables are walked).
fn paths(t: &Table, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    for (k, v) in t {
        prefix.push(Step::Key(k.clone()));
        out.push(prefix.clone());
        match v {
            Value::Table(inner) => paths(inner, prefix, out),
            Value::Array(a) => {
                for (i, item) in a.iter().enumerate() {
                    if let Value::Table(inner) = item {
                        prefix.push(Step::Index(i));
                        out.push(prefix.clone());
                        paths(inner, prefix, out);
                        prefix.pop();
                    }
                }
            }
            _ => {}
        }
        prefix.pop();
    }
}

#[derive(Clone, Debug)]
enum Step {
    Key(String),
    Index(usize),
}

fn at<'t>(v: &'t mut Value, path: &[Step]) -> Option<&'t mut Value> {
    let mut v = v;
    for s in path {
        v = match (s, v) {
            (Step::Key(k), Value::Table(t)) => t.get_mut(k)?,
            (Step::Index(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(v)
}

/// `seed` with one to four changes: a value replaced by a hostile one, a key removed, an
/// unknown key added, an array element repeated or dropped.
pub(crate) fn mutated(seed: &Table, u: &mut Unstructured<'_>, words: &[&str]) -> Result<Table> {
    let mut doc = Value::Table(seed.clone());
    for _ in 0..u.int_in_range(1..=4)? {
        let mut all = Vec::new();
        if let Value::Table(t) = &doc {
            paths(t, &mut Vec::new(), &mut all);
        }
        if all.is_empty() {
            break;
        }
        let path = u.choose(&all)?.clone();
        let (last, parent) = path.split_last().expect("paths are not empty");
        let value = hostile_value(u, words)?;
        let op = u.int_in_range(0..=9)?;
        let Some(parent) = at(&mut doc, parent) else {
            continue;
        };
        match (op, last, parent) {
            (0, Step::Key(k), Value::Table(t)) => {
                t.remove(k);
            }
            (1, _, Value::Table(t)) => {
                t.insert(
                    u.choose(&["speed", "windows", "duraton", ""])?.to_string(),
                    value,
                );
            }
            (2, Step::Index(i), Value::Array(a)) => {
                let item = a[*i].clone();
                for _ in 0..u.int_in_range(1..=70)? {
                    a.push(item.clone());
                }
            }
            (3, Step::Index(i), Value::Array(a)) => {
                a.remove(*i);
            }
            // A table is replaced only now and then: its fields are where the findings are.
            (_, Step::Key(k), Value::Table(t))
                if op == 9 || !matches!(t.get(k), Some(Value::Table(_))) =>
            {
                t.insert(k.clone(), value);
            }
            _ => {}
        }
    }
    Ok(match doc {
        Value::Table(t) => t,
        _ => Table::new(),
    })
}

/// The seeds (TOML texts) as tables, parsed once.
pub(crate) fn tables(seeds: &[String]) -> Vec<Table> {
    seeds
        .iter()
        .map(|s| toml::from_str(s).unwrap_or_default())
        .collect()
}

/// A hostile document from one of `seeds`, as TOML text.
pub(crate) fn document(
    seeds: &[Table],
    u: &mut Unstructured<'_>,
    words: &[&str],
) -> Result<String> {
    let doc = mutated(u.choose(seeds)?, u, words)?;
    Ok(toml::to_string(&doc).unwrap_or_default())
}

/// Runs `parse` on hostile TOML: `data`'s first byte says whether the rest is the text
/// itself or the choices that mutate one of `seeds`.
pub(crate) fn text_or_document(data: &[u8], seeds: &[Table], words: &[&str], parse: impl Fn(&str)) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    if mode & 1 == 0 {
        if let Ok(text) = std::str::from_utf8(rest) {
            parse(text);
        }
        return;
    }
    if let Ok(doc) = document(seeds, &mut Unstructured::new(rest), words) {
        parse(&doc);
    }
}
