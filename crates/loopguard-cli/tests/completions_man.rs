//! Shell completions and the manual page, generated from the clap definitions.

mod common;

use common::{bin, run_command};

fn lg(args: &[&str]) -> Vec<u8> {
    let mut cmd = bin();
    cmd.args(args);
    let out = run_command(cmd, b"");
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

const SUBCOMMANDS: [&str; 9] = [
    "replay",
    "config",
    "scan",
    "serve",
    "hook",
    "mcp-proxy",
    "sessions",
    "completions",
    "man",
];

#[test]
fn bash_completion_is_valid_bash_and_knows_every_command() {
    let script = lg(&["completions", "bash"]);
    let text = String::from_utf8(script.clone()).unwrap();
    for sub in SUBCOMMANDS {
        assert!(text.contains(sub), "{sub}");
    }
    assert!(text.contains("--print-config") && text.contains("claude-code"));
    // bash parses it, and completing `loopguard ser` offers `serve`.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("loopguard.bash");
    std::fs::write(&file, &script).unwrap();
    let check = std::process::Command::new("bash")
        .arg("-n")
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let probe = format!(
        "source {}; COMP_WORDS=(loopguard ser); COMP_CWORD=1; COMP_LINE='loopguard ser'; COMP_POINT=13; _loopguard loopguard ser loopguard; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        file.display()
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &probe])
        .output()
        .unwrap();
    let offered = String::from_utf8_lossy(&out.stdout);
    assert!(offered.lines().any(|l| l == "serve"), "{offered}");
}

#[test]
fn other_shells() {
    for (shell, marker) in [
        ("zsh", "#compdef loopguard"),
        ("fish", "complete -c loopguard"),
        ("elvish", "loopguard"),
        ("powershell", "loopguard"),
    ] {
        let text = String::from_utf8(lg(&["completions", shell])).unwrap();
        assert!(text.contains(marker), "{shell}");
        assert!(text.contains("mcp-proxy"), "{shell}");
    }
}

#[test]
fn the_manual_renders_and_covers_every_command() {
    let page = String::from_utf8(lg(&["man"])).unwrap();
    assert!(
        page.starts_with(".ie \\n(.g .ds Aq \\(aq") || page.contains(".TH loopguard 1"),
        "{}",
        &page[..200.min(page.len())]
    );
    assert!(page.contains(".TH loopguard 1"));
    for sub in SUBCOMMANDS {
        // roff escapes hyphens.
        assert!(page.contains(&sub.replace('-', "\\-")), "{sub}");
    }
    // Pages per subcommand.
    let dir = tempfile::tempdir().unwrap();
    lg(&["man", "--dir", dir.path().to_str().unwrap()]);
    for page in [
        "loopguard.1",
        "loopguard-serve.1",
        "loopguard-hook.1",
        "loopguard-hook-install.1",
        "loopguard-sessions-show.1",
    ] {
        assert!(dir.path().join(page).exists(), "{page}");
    }
    // A positional that takes several values says so, as `--help` does.
    for (page, usage) in [
        ("loopguard-scan.1", "[OPTIONS] [PATH]..."),
        (
            "loopguard-mcp-proxy.1",
            "[OPTIONS] \\-\\- <SERVER_COMMAND>...",
        ),
    ] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
        let synopsis = text
            .split(".SH SYNOPSIS\n")
            .nth(1)
            .and_then(|rest| rest.lines().next())
            .unwrap_or_default();
        assert!(synopsis.ends_with(usage), "{page}: {synopsis}");
    }
    // groff renders every page without a warning, when groff is here (man-db's formatter;
    // -k converts the UTF-8 input first, as man does).
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let page = entry.unwrap().path();
        let Ok(out) = std::process::Command::new("groff")
            .args(["-k", "-man", "-Tutf8", "-ww", "-z"])
            .arg(&page)
            .output()
        else {
            break;
        };
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{}: {}",
            page.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
