//! The key rules: what a key may hold, and that two keys which look the same are the same.

use tripline::registry::{Key, ScopeKind};

/// Every `Default_Ignorable_Code_Point` range of Unicode 15.1 (DerivedCoreProperties.txt),
/// written out here independently of the registry's table.
const INVISIBLE: [(u32, u32); 17] = [
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
];

#[test]
fn keys_that_differ_by_invisible_or_bidi_characters_are_refused() {
    // `shard=\u{202E}71` would show as `shard=17`; `a\u{200B}b` as `ab`.
    for (text, field) in [
        ("catalog/shard=\u{202E}71", "key.scope"),
        ("catalog/shard=1\u{200B}7", "key.scope"),
        ("pay\u{200D}ments", "key.dependency"),
        ("\u{FEFF}payments/tenant=acme", "key.dependency"),
        ("payments/tenant=ac\u{2066}me\u{2069}", "key.scope"),
    ] {
        let err = text.parse::<Key>().unwrap_err();
        assert_eq!(err.field(), field, "{text:?}: {err}");
        assert!(
            err.value().contains("U+"),
            "the value names the character: {err}"
        );
        assert!(err.allowed().contains("invisible"), "{err}");
    }
    let err = Key::scoped("catalog", ScopeKind::Shard, "\u{202E}71").unwrap_err();
    assert_eq!(err.value(), "\"\\u{202e}71\" (U+202E at byte 0)");
}

#[test]
fn every_default_ignorable_code_point_is_refused_and_its_neighbours_are_not() {
    for (lo, hi) in INVISIBLE {
        for cp in lo..=hi {
            let Some(c) = char::from_u32(cp) else {
                continue;
            };
            assert!(
                Key::new(&format!("a{c}b")).is_err(),
                "U+{cp:04X} accepted in a dependency"
            );
            assert!(
                Key::scoped("a", ScopeKind::Tenant, &format!("x{c}")).is_err(),
                "U+{cp:04X} accepted in a scope"
            );
        }
        // The visible characters just outside each range are still allowed (where they are
        // not whitespace or control characters themselves).
        for cp in [lo - 1, hi + 1] {
            let Some(c) = char::from_u32(cp) else {
                continue;
            };
            if c.is_whitespace()
                || c.is_control()
                || INVISIBLE.iter().any(|(l, h)| (*l..=*h).contains(&cp))
            {
                continue;
            }
            assert!(Key::new(&format!("a{c}b")).is_ok(), "U+{cp:04X} refused");
        }
    }
}

#[test]
fn visible_unicode_names_stay_allowed() {
    for text in [
        "café",
        "payments/tenant=Zürich",
        "東京/region=関西",
        "db/shard=٣",
    ] {
        let k: Key = text.parse().unwrap_or_else(|e| panic!("{text:?}: {e}"));
        assert_eq!(k.to_string(), text);
    }
}
