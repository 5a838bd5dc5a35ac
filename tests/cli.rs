//! The command line through the real binary: each subcommand's `--help`
//! lists what it takes, settings work after `serve`, and
//! docs/configuration.md agrees with `--help`.

mod common;
use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// One option in `--help`: its `[env: …]`, `[default: …]` and possible values.
#[derive(Debug, Default)]
struct Opt {
    env: Option<String>,
    default: Option<String>,
    choices: Vec<String>,
}

/// `rkllmd ARGS --help`, by long flag (`--port`).
fn help(args: &[&str]) -> BTreeMap<String, Opt> {
    let out = Command::new(env!("CARGO_BIN_EXE_rkllmd")).args(args).arg("--help").output().unwrap();
    assert!(out.status.success(), "{args:?} --help: {}", String::from_utf8_lossy(&out.stderr));
    // Each option's text: its flag line and the lines below it (long help),
    // or the rest of the line (short help, when no option has a long one).
    let mut texts: BTreeMap<String, String> = BTreeMap::new();
    let mut current = None;
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let trimmed = line.trim_start();
        let flag = trimmed.strip_prefix("-h, ").or(trimmed.strip_prefix("-V, ")).unwrap_or(trimmed);
        if line.starts_with("  ") && flag.starts_with("--") {
            let name = flag.split_whitespace().next().unwrap().to_owned();
            current = Some(name.clone());
            texts.insert(name, flag.to_owned());
        } else if let Some(text) = current.as_ref().and_then(|name| texts.get_mut(name)) {
            text.push('\n');
            text.push_str(trimmed);
        }
    }
    let bracket =
        |text: &str, tag: &str| text.split_once(tag).map(|(_, rest)| rest.split(']').next().unwrap().to_owned());
    texts
        .into_iter()
        .map(|(flag, text)| {
            let mut choices: Vec<String> = bracket(&text, "[possible values: ")
                .map(|list| list.split(", ").map(str::to_owned).collect())
                .unwrap_or_default();
            // Possible values with their own help: `- auto: The real runtime …`.
            choices.extend(text.lines().filter_map(|l| Some(l.strip_prefix("- ")?.split_once(':')?.0.to_owned())));
            let env = bracket(&text, "[env: ").map(|e| e.split('=').next().unwrap().to_owned());
            (flag, Opt { env, default: bracket(&text, "[default: "), choices })
        })
        .collect()
}

fn flags(opts: &BTreeMap<String, Opt>) -> BTreeSet<&str> {
    opts.keys().map(String::as_str).collect()
}

fn doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/configuration.md")).unwrap()
}

/// The settings table: `| key | flag | variable | default | meaning |`, by flag.
fn doc_settings(doc: &str) -> BTreeMap<String, Vec<String>> {
    doc.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| l.trim_matches('|').split(" | ").map(|c| c.trim().to_owned()).collect::<Vec<_>>())
        .filter(|cells| cells.len() == 5 && cells[1].starts_with("`--"))
        .map(|cells| (cells[1].trim_matches('`').to_owned(), cells))
        .collect()
}

/// Clap's own options, in every command.
const CLAP: [&str; 2] = ["--help", "--version"];

#[test]
fn every_setting_in_help_is_in_the_doc_with_its_variable_and_default() {
    let top = help(&[]);
    let doc = doc();
    let table = doc_settings(&doc);
    let mut checked = 0;
    for (flag, opt) in &top {
        if CLAP.contains(&flag.as_str()) {
            continue;
        }
        if ["--config", "--print-config"].contains(&flag.as_str()) {
            assert!(doc.contains(&format!("`{flag}")), "docs/configuration.md does not describe {flag}");
            continue;
        }
        let row = table.get(flag).unwrap_or_else(|| panic!("{flag} is missing from the settings table"));
        let key = flag.trim_start_matches("--").replace('-', "_");
        assert_eq!(row[0], format!("`{key}`"), "{flag}: TOML key");
        let env = opt.env.as_deref().unwrap_or_else(|| panic!("{flag} has no variable in --help"));
        assert_eq!(row[2], format!("`{env}`"), "{flag}: variable");
        match &opt.default {
            Some(default) => {
                assert!(row[3].starts_with(&format!("`{default}`")), "{flag}: default {default}, doc: {}", row[3])
            }
            None => assert!(
                row[3] == "unset" || row[3].starts_with("`[]`"),
                "{flag}: no default in --help, doc: {}",
                row[3]
            ),
        }
        for choice in &opt.choices {
            assert!(row[4].contains(&format!("`{choice}`")), "{flag}: the doc does not name `{choice}`");
        }
        checked += 1;
    }
    assert!(checked >= 25, "only {checked} settings found in --help");
    assert_eq!(checked, table.len(), "the table has rows for flags --help does not list");
}

#[test]
fn the_doc_names_no_flag_that_does_not_exist() {
    let (top, doctor, pull) = (help(&[]), help(&["doctor"]), help(&["pull"]));
    let known: BTreeSet<&str> = flags(&top).union(&flags(&doctor)).chain(flags(&pull).iter()).copied().collect();
    let doc = doc();
    let named: BTreeSet<&str> = doc
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.strip_prefix("--").is_some_and(|name| name.starts_with(|c: char| c.is_ascii_lowercase())))
        .collect();
    assert!(named.len() > 25, "{named:?}");
    let unknown: Vec<&&str> = named.iter().filter(|f| !known.contains(**f)).collect();
    assert!(unknown.is_empty(), "docs/configuration.md names flags rkllmd does not have: {unknown:?}");
}

#[test]
fn each_subcommand_lists_what_it_takes() {
    let top = help(&[]);
    let settings: BTreeSet<&str> = flags(&top).into_iter().filter(|f| !CLAP.contains(f)).collect();
    assert!(settings.contains("--port") && settings.contains("--config") && settings.contains("--print-config"));

    let serve = help(&["serve"]);
    let serve_flags: BTreeSet<&str> = flags(&serve).into_iter().filter(|f| !CLAP.contains(f)).collect();
    assert_eq!(serve_flags, settings, "serve takes exactly the top level's settings");
    assert_eq!(serve["--port"].default.as_deref(), Some("8080"));
    assert_eq!(serve["--port"].env.as_deref(), Some("RKLLMD_PORT"));

    let doctor = help(&["doctor"]);
    let doctor_flags = flags(&doctor);
    assert!(settings.is_subset(&doctor_flags), "doctor lacks {:?}", settings.difference(&doctor_flags));
    assert!(doctor_flags.contains("--root") && doctor_flags.contains("--smoke"));
    assert!(!settings.contains("--root"), "--root is doctor's own");

    let pull = help(&["pull"]);
    let pull_flags = flags(&pull);
    assert!(settings.is_subset(&pull_flags), "pull lacks {:?}", settings.difference(&pull_flags));
    assert!(pull_flags.contains("--chip") && pull_flags.contains("--revision"));
    assert_eq!(pull["--revision"].default.as_deref(), Some("main"));

    // bench is a client of any server: of the daemon's settings it has none
    // (its own --model and --api-key name what it asks of the server).
    let bench = help(&["bench"]);
    let shared: BTreeSet<&str> = flags(&bench).intersection(&settings).copied().collect();
    assert_eq!(shared, BTreeSet::from(["--api-key", "--model"]), "bench lists serve's settings");
    assert_eq!(bench["--api-key"].env.as_deref(), Some("RKLLMD_BENCH_API_KEY"), "bench's own key");
    assert!(bench.contains_key("--url") && bench.contains_key("--concurrency"));
}

#[tokio::test]
async fn settings_after_serve_are_taken_and_beat_those_before_it() {
    // The harness puts `--host 127.0.0.1 --port 0` first; everything else here follows `serve`.
    let d = Daemon::start(&[
        "--model-id",
        "before-serve",
        "serve",
        "--port",
        "0",
        "--backend",
        "sim",
        "--model",
        "sim:instant",
        "--model-id",
        "after-serve",
    ]);
    assert_eq!(d.get_json("/health/ready").await.0, 200);
    let (code, models) = d.get_json("/v1/models").await;
    assert_eq!(code, 200);
    let ids: Vec<&str> = models["data"].as_array().unwrap().iter().filter_map(|m| m["id"].as_str()).collect();
    assert_eq!(ids, ["after-serve"]);
    assert!(d.terminate().success());
}

#[test]
fn doctor_reads_settings_given_after_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_rkllmd"))
        .args(["--queue-depth", "3", "doctor", "--port", "9123", "--print-config"])
        .env("RKLLMD_PORT", "9000")
        .env("RKLLMD_QUEUE_DEPTH", "4")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("port = 9123\n"), "doctor's flag beats the variable: {text}");
    assert!(text.contains("queue_depth = 3\n"), "a flag before the subcommand beats the variable: {text}");
}

#[test]
fn serve_settings_are_refused_after_bench() {
    let out = Command::new(env!("CARGO_BIN_EXE_rkllmd")).args(["bench", "--backend", "sim"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--backend"));
}
