//! `budgets.withoutProgress` at its documented defaults on both labelled corpora
//! (`corpus/labels.json`, `corpus2/labels.json`), scanned in place by the real
//! `loopguard scan`: no labelled-healthy session is stopped by it, every labelled loop that
//! OpenClaw's own detectors stop is stopped by it no later, and it stops at least the
//! loops it stops today. Prints the table of docs/budgets.md: per labelled session, where
//! `withoutProgress` stops it, and where OpenClaw's detectors and the recommended preset
//! first block and stop it, with what each session spent, what it spent inside the loops the
//! recommended preset finds, and where an example flat budget (`--budget run.cost=2
//! --budget run.calls=50`) stops it (prints SKIPPED when the corpus is absent).

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{run, shared_dir};
use serde_json::Value;

/// The budgets block with nothing in it: `withoutProgress` on at its defaults, alone (the
/// rolling detectors off, so that the stop is its own).
const WITHOUT_PROGRESS: &str =
    "{ tools: { loopDetection: { enabled: false } }, loopguard: { budgets: {} } }";
/// OpenClaw's own detectors at their defaults.
const OPENCLAW: &str = "{ tools: { loopDetection: { enabled: true } } }";
/// The recommended preset.
const PRESET: &str =
    "{ tools: { loopDetection: { enabled: true } }, loopguard: { preset: 'recommended' } }";

/// An example flat budget, given as `--budget` flags over a config with the detectors off:
/// $2 or 50 tool calls per run (`withoutProgress` off, so that the stop is the flat cap's).
const FLAT: &[&str] = &[
    "--budget",
    "run.cost=2",
    "--budget",
    "run.calls=50",
    "--budget",
    "withoutProgress.enabled=false",
];
const DETECTION_OFF: &str = "{ tools: { loopDetection: { enabled: false } } }";

/// Labelled loops `withoutProgress` stops today at its defaults, per corpus: a floor.
const MIN_STOPPED: [(&str, usize); 2] = [("corpus", 3), ("corpus2", 5)];

struct Label {
    id: String,
    file: String,
    /// Which sessions of the file (corpus2's `match`; corpus's `session`).
    select: Vec<String>,
    loop_: bool,
    /// Whether the label is confident (corpus2's `assert`; every label of corpus).
    confident: bool,
    calls: Option<(u64, u64)>,
}

fn labels(corpus: &Path) -> Vec<Label> {
    let text = std::fs::read_to_string(corpus.join("labels.json")).unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let calls = |l: &Value| {
        l["calls"]
            .as_array()
            .map(|r| (r[0].as_u64().unwrap(), r[1].as_u64().unwrap()))
    };
    match doc.as_array() {
        Some(list) => list
            .iter()
            .enumerate()
            .map(|(i, l)| Label {
                id: format!("C{}", i + 1),
                file: l["file"].as_str().unwrap().to_owned(),
                select: l["session"]
                    .as_str()
                    .map(|s| vec![format!("session:{s}")])
                    .unwrap_or_else(|| vec!["*".into()]),
                loop_: l["label"] == "loop",
                confident: true,
                calls: calls(l),
            })
            .collect(),
        None => doc["labels"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| Label {
                id: l["id"].as_str().unwrap().to_owned(),
                file: l["file"].as_str().unwrap().to_owned(),
                select: l["match"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| m.as_str().unwrap().to_owned())
                    .collect(),
                loop_: l["kind"] == "loop",
                confident: l["assert"] == true,
                calls: calls(l),
            })
            .collect(),
    }
}

/// The sessions of the label's file that it selects.
fn sessions<'a>(doc: &'a Value, corpus: &Path, label: &Label) -> Vec<&'a Value> {
    let path = corpus.join(&label.file);
    let path = path.to_str().unwrap().trim_end_matches('/');
    let of_file: Vec<&Value> = doc["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["file"].as_str().unwrap().starts_with(path))
        .collect();
    let n = of_file.len();
    of_file
        .into_iter()
        .enumerate()
        .filter(|(k, s)| {
            let id = s["session"].as_str().unwrap();
            label.select.iter().any(|m| match m.split_once(':') {
                None => m == "*",
                // corpus: one file may hold several sessions; a single one is the label's.
                Some(("session", want)) => n == 1 || id == want || id.ends_with(want),
                Some(("id", want)) => id == want,
                Some(("contains", part)) => id.contains(part),
                Some(("nth", k_th)) => k_th.parse::<usize>().ok() == Some(k + 1),
                _ => false,
            })
        })
        .map(|(_, s)| s)
        .collect()
}

/// The first call index of a finding of the sessions that `keep` accepts.
fn first(sessions: &[&Value], keep: impl Fn(&Value) -> bool) -> Option<u64> {
    sessions
        .iter()
        .flat_map(|s| s["findings"].as_array().unwrap())
        .filter(|f| keep(f))
        .filter_map(|f| f["call_index"].as_u64())
        .min()
}

/// Where a run of the sessions is stopped (a terminal block), if one is.
fn stopped(sessions: &[&Value]) -> Option<u64> {
    sessions
        .iter()
        .flat_map(|s| s["loops"].as_array().unwrap())
        .filter(|l| l["stopped_run"] == true)
        .filter_map(|l| l["first_block"]["call_index"].as_u64())
        .min()
}

fn scan(config: &str, files: &BTreeSet<String>, name: &str) -> Value {
    scan_with(config, &[], files, name)
}

fn scan_with(config: &str, flags: &[&str], files: &BTreeSet<String>, name: &str) -> Value {
    let path = std::env::temp_dir().join(format!("lg-{name}-{}.json5", std::process::id()));
    std::fs::write(&path, config).unwrap();
    let mut args = vec!["scan", "--json", "--config", path.to_str().unwrap()];
    args.extend_from_slice(flags);
    args.extend(files.iter().map(String::as_str));
    let out = run(&args, b"");
    std::fs::remove_file(&path).unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}); stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn show(at: Option<u64>) -> String {
    at.map_or_else(|| "-".to_owned(), |n| n.to_string())
}

/// `usage` or `loop_spend` summed over the sessions: tokens and cost, or `unknown`.
fn spend(sessions: &[&Value], field: &str) -> String {
    let known: Vec<&Value> = sessions
        .iter()
        .map(|s| &s[field])
        .filter(|u| u.is_object())
        .collect();
    if known.is_empty() {
        return "unknown".to_owned();
    }
    let tokens: u64 = known.iter().map(|u| u["tokens"].as_u64().unwrap()).sum();
    let costs: Vec<f64> = known.iter().filter_map(|u| u["cost"].as_f64()).collect();
    let tokens = match tokens {
        0..=9_999 => tokens.to_string(),
        10_000..=999_999 => format!("{:.0}k", tokens as f64 / 1e3),
        _ => format!("{:.1}M", tokens as f64 / 1e6),
    };
    match costs.is_empty() {
        true => tokens,
        false => format!("{tokens}, ${:.2}", costs.iter().sum::<f64>()),
    }
}

/// Where a budget first stops the sessions: `detector@call`.
fn budget_stop(sessions: &[&Value]) -> String {
    sessions
        .iter()
        .filter_map(|s| s["budget_stop"].as_object())
        .min_by_key(|b| b["call_index"].as_u64())
        .map_or_else(
            || "-".to_owned(),
            |b| {
                let name = match b["detector"].as_str().unwrap() {
                    "run_budget" => "run",
                    other => other,
                };
                let saved = &b["saved"];
                let cost = saved["cost"]
                    .as_f64()
                    .map_or(String::new(), |c| format!(", ${c:.2} saved"));
                format!(
                    "{name} at {} ({} calls{cost})",
                    b["call_index"], saved["calls"]
                )
            },
        )
}

#[test]
fn without_progress_spares_healthy_sessions_and_stops_loops_no_later_than_openclaw() {
    let Some(shared) = shared_dir() else {
        println!("SKIPPED: shared folder not found (set LOOPGUARD_SHARED_DIR)");
        return;
    };
    let mut problems = Vec::new();
    println!("| corpus | label | kind | range | calls | spend (tokens, cost) | inside loops (preset) | withoutProgress stops | $2 / 50 calls per run stops | OpenClaw blocks / stops | preset blocks / stops |");
    println!("|---|---|---|---|---:|---|---|---:|---|---:|---:|");
    for (name, floor) in MIN_STOPPED {
        let corpus = shared.join(name);
        let labels = labels(&corpus);
        let files: BTreeSet<String> = labels
            .iter()
            .map(|l| {
                let path = corpus.join(&l.file);
                path.to_str().unwrap().trim_end_matches('/').to_owned()
            })
            .collect();
        let budget = scan(WITHOUT_PROGRESS, &files, "wp");
        let openclaw = scan(OPENCLAW, &files, "openclaw");
        let preset = scan(PRESET, &files, "preset");
        let flat = scan_with(DETECTION_OFF, FLAT, &files, "flat");
        let mut stopped_loops = 0;
        for label in &labels {
            let [b, o, p, f] =
                [&budget, &openclaw, &preset, &flat].map(|doc| sessions(doc, &corpus, label));
            if b.is_empty() {
                problems.push(format!("{name} {}: no session read", label.id));
                continue;
            }
            let stop = first(&b, |f| {
                f["detector"] == "no_progress_budget" && f["level"] == "critical"
            });
            let other = first(&b, |f| f["detector"] != "no_progress_budget");
            assert_eq!(
                other, None,
                "only withoutProgress runs in {WITHOUT_PROGRESS}"
            );
            let blocks = |s: &[&Value]| first(s, |f| f["level"] == "critical");
            let calls: u64 = b.iter().map(|s| s["calls"].as_u64().unwrap()).sum();
            assert_eq!(
                stop.is_some(),
                b.iter()
                    .any(|s| s["budget_stop"]["detector"] == "no_progress_budget"),
                "the report's budget_stop agrees with the findings"
            );
            println!(
                "| {name} | {} | {}{} | {} | {calls} | {} | {} | {} | {} | {} / {} | {} / {} |",
                label.id,
                if label.loop_ { "loop" } else { "healthy" },
                if label.confident {
                    ""
                } else {
                    " (low confidence)"
                },
                label
                    .calls
                    .map_or_else(|| "-".to_owned(), |(lo, hi)| format!("{lo}-{hi}")),
                spend(&b, "usage"),
                spend(&p, "loop_spend"),
                show(stop),
                budget_stop(&f),
                show(blocks(&o)),
                show(stopped(&o)),
                show(blocks(&p)),
                show(stopped(&p)),
            );
            if !label.loop_ {
                if label.confident && stop.is_some() {
                    problems.push(format!(
                        "{name} {} ({}): healthy, but withoutProgress stops it at call {}",
                        label.id,
                        label.file,
                        show(stop)
                    ));
                }
                continue;
            }
            stopped_loops += usize::from(stop.is_some());
            if let Some(theirs) = stopped(&o) {
                if stop.is_none_or(|ours| ours > theirs) {
                    problems.push(format!(
                        "{name} {}: OpenClaw's detectors stop it at {theirs}, withoutProgress at {}",
                        label.id,
                        show(stop)
                    ));
                }
            }
        }
        println!("{name}: withoutProgress stops {stopped_loops} labelled loops");
        if stopped_loops < floor {
            problems.push(format!(
                "{name}: withoutProgress stops {stopped_loops} labelled loops, fewer than {floor}"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// `scan` hands the transcript's usage to the guard: a run cost budget stops the
/// mini-swe-agent sessions (whose transcripts record each response's cost) where their
/// spend passes it, after a warning, and the report says what stopping would have saved.
#[test]
fn scan_applies_cost_budgets_to_the_transcripts_usage() {
    let Some(shared) = shared_dir() else {
        println!("SKIPPED: shared folder not found (set LOOPGUARD_SHARED_DIR)");
        return;
    };
    let files = BTreeSet::from([shared
        .join("corpus/mini-swe-agent")
        .to_str()
        .unwrap()
        .to_owned()]);
    let doc = scan(
        "{ tools: { loopDetection: { enabled: true } }, loopguard: { budgets: { run: { cost: 0.05 }, withoutProgress: { enabled: false } } } }",
        &files,
        "cost",
    );
    let mut stopped = 0;
    for s in doc["sessions"].as_array().unwrap() {
        let cost = s["usage"]["cost"].as_f64().unwrap();
        let warned = first(&[s], |f| {
            f["detector"] == "run_budget" && f["level"] == "warning"
        });
        let blocked = first(&[s], |f| {
            f["detector"] == "run_budget" && f["level"] == "critical"
        });
        println!(
            "{} {}: ${cost:.4}, warned at {}, stopped at {}, saved {}",
            s["file"],
            s["session"],
            show(warned),
            show(blocked),
            s["saved"]
        );
        if cost < 0.04 {
            assert_eq!(warned, None, "{s}");
        }
        if let Some(at) = blocked {
            stopped += 1;
            assert!(warned.is_some_and(|w| w < at), "warned before the stop");
            assert!(s["saved"]["cost"].as_f64().unwrap() > 0.0, "{}", s["saved"]);
        }
    }
    assert!(stopped >= 2, "{stopped} sessions stopped");
}
