//! `loopguard scan --budget KEY=VALUE`: budgets given on the command line, laid over the
//! config's `loopguard.budgets` block.
//!
//! The keys are the config's own: every key of the `budgets` block, a scope's limit as
//! `SCOPE.KEY` (`run.cost`, `withoutProgress.calls`) and the block's own settings by name
//! (`warnAt`, `timeZone`), read from the engine's one description of the block
//! ([`loopguard::config::schema`]), so that a key added there is a flag here. The value is
//! judged by the engine's parser, as the same key in a file would be.

use loopguard::config::extensions::BudgetsBlock;
use loopguard::config::{schema, Field, FieldKind};
use loopguard::ConfigSet;
use serde_json::{json, Value};

/// One `--budget KEY=VALUE`, parsed: the budgets block it stands for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetFlag(pub BudgetsBlock);

/// Every key `--budget` takes, with what its value must be: `run.cost`, …,
/// `withoutProgress.enabled`, `warnAt`, `timeZone`.
pub fn budget_keys() -> Vec<(String, FieldKind)> {
    let budgets = schema()
        .iter()
        .filter(|(path, _)| *path == "loopguard")
        .flat_map(|(_, fields)| fields.iter())
        .find(|f| f.key == "budgets");
    let Some(Field {
        kind: FieldKind::Block(fields),
        ..
    }) = budgets
    else {
        return Vec::new();
    };
    let mut keys = Vec::new();
    for field in *fields {
        match field.kind {
            FieldKind::Block(inner) => keys.extend(
                inner
                    .iter()
                    .map(|f| (format!("{}.{}", field.key, f.key), f.kind)),
            ),
            kind => keys.push((field.key.to_owned(), kind)),
        }
    }
    keys
}

/// Parses `KEY=VALUE` (clap's value parser for `--budget`).
pub fn parse_budget_flag(text: &str) -> Result<BudgetFlag, String> {
    let keys = budget_keys();
    let Some((key, value)) = text.split_once('=') else {
        return Err(format!(
            "expected KEY=VALUE, such as run.cost=2 (keys: {})",
            names(&keys)
        ));
    };
    let (key, value) = (key.trim(), value.trim());
    let Some((_, kind)) = keys.iter().find(|(k, _)| k == key) else {
        let hint = closest(key, &keys)
            .map(|k| format!(" (did you mean `{k}`?)"))
            .unwrap_or_default();
        return Err(format!(
            "unknown budget key `{key}`{hint}; the keys are {}",
            names(&keys)
        ));
    };
    let value = json_value(*kind, value)?;
    let mut member = json!({});
    match key.split_once('.') {
        Some((scope, limit)) => member[scope] = json!({ limit: value }),
        None => member[key] = value,
    }
    let doc = json!({ "loopguard": { "budgets": member } });
    let set = ConfigSet::parse(&doc.to_string()).map_err(|e| {
        e.issues
            .iter()
            .map(|i| i.to_string().replace("loopguard.budgets.", ""))
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    set.global_blocks()
        .extensions
        .as_ref()
        .and_then(|x| x.budgets.clone())
        .map(BudgetFlag)
        .ok_or_else(|| format!("{key}: not a budget"))
}

/// The flags laid over each other in order (a later flag's key wins).
pub fn merged(flags: &[BudgetFlag]) -> Option<BudgetsBlock> {
    flags.iter().fold(None, |acc, BudgetFlag(b)| {
        Some(match acc {
            Some(a) => BudgetsBlock::overlay(&a, b),
            None => b.clone(),
        })
    })
}

/// The text of a flag's value as the JSON value its key takes; the engine then judges
/// its range.
fn json_value(kind: FieldKind, value: &str) -> Result<Value, String> {
    match kind {
        FieldKind::Switch => match value {
            "true" => Ok(json!(true)),
            "false" => Ok(json!(false)),
            _ => Err(format!("expected true or false, found `{value}`")),
        },
        FieldKind::Count { .. } | FieldKind::Decimal { .. } => {
            serde_json::from_str::<serde_json::Number>(value)
                .map(Value::Number)
                .map_err(|_| format!("expected a finite number, found `{value}`"))
        }
        _ => Ok(json!(value)),
    }
}

fn names(keys: &[(String, FieldKind)]) -> String {
    keys.iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The known key closest to `key`, when one is close enough to be a typo.
fn closest<'a>(key: &str, keys: &'a [(String, FieldKind)]) -> Option<&'a str> {
    let lower = key.to_ascii_lowercase();
    keys.iter()
        .map(|(k, _)| (strsim::jaro_winkler(&lower, &k.to_ascii_lowercase()), k))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_come_from_the_config_schema() {
        let keys: Vec<String> = budget_keys().into_iter().map(|(k, _)| k).collect();
        for key in [
            "run.cost",
            "run.tokens",
            "run.calls",
            "run.wallSeconds",
            "session.cost",
            "agent.tokens",
            "day.calls",
            "withoutProgress.calls",
            "withoutProgress.enabled",
            "warnAt",
            "timeZone",
        ] {
            assert!(keys.iter().any(|k| k == key), "{key} missing from {keys:?}");
        }
        assert!(!keys.iter().any(|k| k == "withoutProgress.wallSeconds"));
    }

    #[test]
    fn flags_parse_to_the_block_a_file_would_give() {
        let flag = parse_budget_flag("run.cost=2").unwrap();
        let file = ConfigSet::parse("{ loopguard: { budgets: { run: { cost: 2 } } } }").unwrap();
        assert_eq!(
            Some(&flag.0),
            file.global_blocks()
                .extensions
                .as_ref()
                .and_then(|x| x.budgets.as_ref())
        );
        let merged = merged(&[
            parse_budget_flag("run.cost=2").unwrap(),
            parse_budget_flag("withoutProgress.calls=15").unwrap(),
            parse_budget_flag("run.cost=3").unwrap(),
        ])
        .unwrap();
        let file = ConfigSet::parse(
            "{ loopguard: { budgets: { run: { cost: 3 }, withoutProgress: { calls: 15 } } } }",
        )
        .unwrap();
        assert_eq!(
            Some(&merged),
            file.global_blocks()
                .extensions
                .as_ref()
                .and_then(|x| x.budgets.as_ref())
        );
    }

    #[test]
    fn bad_flags_say_what_is_wrong() {
        for (flag, says) in [
            (
                "run.cst=2",
                "unknown budget key `run.cst` (did you mean `run.cost`?)",
            ),
            (
                "withoutprogress.calls=3",
                "did you mean `withoutProgress.calls`?",
            ),
            (
                "nothing=3",
                "unknown budget key `nothing`; the keys are run.tokens",
            ),
            ("run.cost", "expected KEY=VALUE"),
            (
                "run.cost=-1",
                "run.cost: expected a finite number, not negative",
            ),
            ("run.cost=inf", "expected a finite number, found `inf`"),
            ("run.cost=NaN", "expected a finite number, found `NaN`"),
            ("run.calls=0", "run.calls"),
            ("run.calls=1.5", "run.calls"),
            ("warnAt=2", "warnAt"),
            ("withoutProgress.enabled=no", "expected true or false"),
            ("timeZone=Mars", "timeZone"),
        ] {
            let error = parse_budget_flag(flag).unwrap_err();
            assert!(error.contains(says), "{flag}: {error}");
        }
    }
}
