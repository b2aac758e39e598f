//! Putting loopguard's hook entries into an agent's settings file, and taking them out.
//!
//! A settings file belongs to its user: it holds their permissions, their other hooks,
//! their comments. An edit here touches loopguard's own entries only, hook handlers whose
//! command runs `loopguard hook AGENT` ([`is_loopguard_command`]), and leaves every other
//! byte where it was: other keys in their order, other hooks, comments (Gemini's settings
//! allow them), indentation and line ends. JSON is edited through a concrete syntax tree
//! (`jsonc-parser`), TOML (Codex's inline `[hooks]` tables in `config.toml`) through
//! `toml_edit`, both made to keep what they do not change.
//!
//! Each edit is checked before it is returned: the result is parsed again the way the
//! agent parses it (strict JSON for Claude Code and Codex, JSON with comments for Gemini,
//! TOML), and it must equal the original once loopguard's entries are taken out of both.
//! So an edit never leaves a file the agent cannot load, and never changes anything else.
//!
//! Installing is idempotent: a loopguard handler already there with the same command is
//! left alone, one with another command (another binary, another `--config`) gets the new
//! command in place, and an event without one gets a matcher group of its own, appended
//! after the user's. Uninstalling removes loopguard's handlers, then the groups, event
//! lists and `hooks` table they leave empty, so installing into a file and uninstalling
//! gives the file back byte for byte.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use jsonc_parser::cst::{CstArray, CstInputValue, CstObject, CstRootNode};
use jsonc_parser::ParseOptions;
use serde_json::Value;
use toml_edit::{ArrayOfTables, DocumentMut, Item, Table};

use crate::{Agent, HandlerField};

/// Whose settings: the user's (every project) or one project's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// `~/.claude`, `~/.codex`, `~/.gemini` (or the agent's own variable).
    User,
    /// `PROJECT/.claude`, `PROJECT/.codex`, `PROJECT/.gemini`.
    Project,
}

/// How a settings file is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Strict JSON (Claude Code's `settings.json`, Codex's `hooks.json`).
    Json,
    /// JSON with comments and trailing commas (Gemini CLI's `settings.json`).
    Jsonc,
    /// TOML (Codex's `config.toml` with inline `[hooks]` tables).
    Toml,
}

/// What an edit did to one event's entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Change {
    /// A loopguard entry was added.
    Added,
    /// A loopguard entry was there with another command, which was replaced.
    Updated,
    /// A loopguard entry with this command was already there.
    Unchanged,
    /// Loopguard's entries were removed.
    Removed,
}

/// The text after an edit, and what changed per event (in the order met).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edit {
    /// The new text of the file.
    pub text: String,
    /// Per event, what happened.
    pub events: Vec<(String, Change)>,
}

impl Edit {
    /// Whether the text differs from the original.
    pub fn changed(&self) -> bool {
        self.events.iter().any(|(_, c)| *c != Change::Unchanged)
    }
}

/// Why a settings file cannot be edited.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InstallError {
    /// The file is not what the agent can read.
    #[error("not valid {format}: {message}")]
    Parse {
        /// `JSON`, `JSON with comments` or `TOML`.
        format: &'static str,
        /// The parser's message.
        message: String,
    },
    /// A value has another type than the agent's settings give it.
    #[error("{path} is {found}, where {agent} expects {expected}")]
    Shape {
        /// Where (`hooks.PreToolUse`).
        path: String,
        /// What the agent expects there.
        expected: &'static str,
        /// What is there.
        found: &'static str,
        /// The agent's name.
        agent: &'static str,
    },
    /// The edit would have changed more than loopguard's entries, or left a file the agent
    /// cannot read (a defect of this module; nothing is written).
    #[error("refusing to write: {0}")]
    Check(String),
}

/// Whether `command` (a shell command line) runs `loopguard hook AGENT` or
/// `loopguard-hook AGENT` (the hook's own binary): the program so named (any directory),
/// then the agent's name.
pub fn is_loopguard_command(agent: Agent, command: &str) -> bool {
    let Ok(words) = shell_words::split(command) else {
        return false;
    };
    let program = words
        .first()
        .and_then(|w| Path::new(w).file_stem())
        .and_then(|s| s.to_str());
    let agent_at = match program {
        Some("loopguard") if words.get(1).map(String::as_str) == Some("hook") => 2,
        Some("loopguard-hook") => 1,
        _ => return false,
    };
    words.get(agent_at).map(String::as_str) == Some(agent.name())
}

/// The directory of an agent's settings. `env` reads the environment: Claude Code moves
/// its user directory with `CLAUDE_CONFIG_DIR`, Codex with `CODEX_HOME`.
pub fn settings_dir(
    agent: Agent,
    scope: Scope,
    home: &Path,
    project: &Path,
    env: impl Fn(&str) -> Option<OsString>,
) -> PathBuf {
    let (dot, variable) = match agent {
        Agent::ClaudeCode => (".claude", Some("CLAUDE_CONFIG_DIR")),
        Agent::Codex => (".codex", Some("CODEX_HOME")),
        Agent::Gemini => (".gemini", None),
    };
    match scope {
        Scope::Project => project.join(dot),
        Scope::User => variable
            .and_then(env)
            .filter(|v| !v.is_empty())
            .map_or_else(|| home.join(dot), PathBuf::from),
    }
}

/// The file to edit in an agent's settings directory, and its format. Codex reads hooks
/// from `hooks.json` and from `[hooks]` tables in `config.toml`, and warns when one layer
/// has both: so when `config.toml` already has hooks and there is no `hooks.json`, the
/// entries go into `config.toml`.
pub fn settings_file(agent: Agent, dir: &Path) -> (PathBuf, Format) {
    match agent {
        Agent::ClaudeCode => (dir.join("settings.json"), Format::Json),
        Agent::Gemini => (dir.join("settings.json"), Format::Jsonc),
        Agent::Codex => {
            let json = dir.join("hooks.json");
            let toml = dir.join("config.toml");
            let toml_has_hooks = !json.exists()
                && std::fs::read_to_string(&toml).is_ok_and(|text| {
                    text.parse::<DocumentMut>()
                        .is_ok_and(|doc| doc.contains_key("hooks"))
                });
            if toml_has_hooks {
                (toml, Format::Toml)
            } else {
                (json, Format::Json)
            }
        }
    }
}

/// The format of a settings file named explicitly: TOML by its extension, else the
/// agent's JSON.
pub fn format_of(agent: Agent, path: &Path) -> Format {
    match (agent, path.extension().and_then(|e| e.to_str())) {
        (_, Some("toml")) => Format::Toml,
        (Agent::Gemini, _) => Format::Jsonc,
        _ => Format::Json,
    }
}

/// Adds (or updates) loopguard's entry running `command` for each event of
/// [`Agent::events`] to the settings `text` (empty for a file that does not exist yet).
pub fn install(
    agent: Agent,
    format: Format,
    text: &str,
    command: &str,
) -> Result<Edit, InstallError> {
    let before = semantic(agent, format, text)?;
    let edit = match format {
        Format::Json | Format::Jsonc => json::install(agent, text, command)?,
        Format::Toml => toml::install(agent, text, command)?,
    };
    let after = semantic(agent, format, &edit.text)?;
    check_same_otherwise(agent, &before, &after)?;
    for event in agent.events() {
        let commands = our_commands(agent, &after, event);
        if commands.is_empty() || commands.iter().any(|c| c != command) {
            return Err(InstallError::Check(format!(
                "hooks.{event} does not run `{command}` after the edit"
            )));
        }
    }
    Ok(edit)
}

/// Removes every loopguard entry for `agent` from the settings `text`, and the groups,
/// event lists and `hooks` table that are left empty by it.
pub fn uninstall(agent: Agent, format: Format, text: &str) -> Result<Edit, InstallError> {
    let before = semantic(agent, format, text)?;
    let edit = match format {
        Format::Json | Format::Jsonc => json::uninstall(agent, text)?,
        Format::Toml => toml::uninstall(agent, text)?,
    };
    let after = semantic(agent, format, &edit.text)?;
    check_same_otherwise(agent, &before, &after)?;
    if let Some(event) = hook_events(&after).find(|e| !our_commands(agent, &after, e).is_empty()) {
        return Err(InstallError::Check(format!(
            "hooks.{event} still runs loopguard after the edit"
        )));
    }
    Ok(edit)
}

/// The document as the agent reads it (`{}` for an empty file).
fn semantic(agent: Agent, format: Format, text: &str) -> Result<Value, InstallError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    let value = match format {
        Format::Json => serde_json::from_str::<Value>(text).map_err(|e| InstallError::Parse {
            format: "JSON",
            message: e.to_string(),
        })?,
        Format::Jsonc => CstRootNode::parse(text, &ParseOptions::default())
            .map_err(|e| InstallError::Parse {
                format: "JSON with comments",
                message: e.to_string(),
            })?
            .to_serde_value()
            .unwrap_or_else(|| Value::Object(Default::default())),
        Format::Toml => {
            toml_edit::de::from_str::<Value>(text).map_err(|e| InstallError::Parse {
                format: "TOML",
                message: e.to_string().trim_end().to_owned(),
            })?
        }
    };
    if !value.is_object() {
        return Err(shape(agent, "the document", "an object", &value));
    }
    if let Some(hooks) = value.get("hooks") {
        if !hooks.is_object() {
            return Err(shape(agent, "hooks", "an object", hooks));
        }
    }
    Ok(value)
}

fn shape(agent: Agent, path: &str, expected: &'static str, value: &Value) -> InstallError {
    InstallError::Shape {
        path: path.to_owned(),
        expected,
        found: match value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        },
        agent: agent.name(),
    }
}

fn hook_events(doc: &Value) -> impl Iterator<Item = &str> {
    doc.get("hooks")
        .and_then(Value::as_object)
        .into_iter()
        .flat_map(|h| h.keys().map(String::as_str))
}

/// Loopguard's commands under `hooks.EVENT` (matcher groups, then their handlers).
fn our_commands(agent: Agent, doc: &Value, event: &str) -> Vec<String> {
    let groups = doc
        .pointer(&format!(
            "/hooks/{}",
            event.replace('~', "~0").replace('/', "~1")
        ))
        .and_then(Value::as_array);
    groups
        .into_iter()
        .flatten()
        .filter_map(|g| g.get("hooks").and_then(Value::as_array))
        .flatten()
        .filter_map(|h| h.get("command").and_then(Value::as_str))
        .filter(|c| is_loopguard_command(agent, c))
        .map(str::to_owned)
        .collect()
}

/// `doc` without loopguard's handlers, nor the groups, event lists and `hooks` object that
/// only held them.
fn without_ours(agent: Agent, mut doc: Value) -> Value {
    let Some(hooks) = doc.get_mut("hooks").and_then(Value::as_object_mut) else {
        return doc;
    };
    let mut removed_any = false;
    hooks.retain(|_, groups| {
        let Some(list) = groups.as_array_mut() else {
            return true;
        };
        let mut removed_here = false;
        list.retain_mut(|group| {
            let Some(handlers) = group.get_mut("hooks").and_then(Value::as_array_mut) else {
                return true;
            };
            let n = handlers.len();
            handlers.retain(|h| {
                !h.get("command")
                    .and_then(Value::as_str)
                    .is_some_and(|c| is_loopguard_command(agent, c))
            });
            let removed = handlers.len() < n;
            removed_here |= removed;
            !(removed && handlers.is_empty())
        });
        removed_any |= removed_here;
        !(removed_here && list.is_empty())
    });
    if removed_any && hooks.is_empty() {
        if let Some(obj) = doc.as_object_mut() {
            obj.remove("hooks");
        }
    }
    doc
}

fn check_same_otherwise(agent: Agent, before: &Value, after: &Value) -> Result<(), InstallError> {
    if without_ours(agent, before.clone()) == without_ours(agent, after.clone()) {
        Ok(())
    } else {
        Err(InstallError::Check(
            "the edit changed settings other than loopguard's hook entries".into(),
        ))
    }
}

/// The handler loopguard registers: `type`, `command`, then the agent's fields.
fn handler_fields(agent: Agent, command: &str) -> Vec<(&'static str, HandlerValue)> {
    let mut fields = vec![
        ("type", HandlerValue::Text("command".into())),
        ("command", HandlerValue::Text(command.into())),
    ];
    fields.extend(agent.handler().iter().map(|&(k, v)| {
        (
            k,
            match v {
                HandlerField::Number(n) => HandlerValue::Number(n),
                HandlerField::Text(s) => HandlerValue::Text(s.into()),
            },
        )
    }));
    fields
}

enum HandlerValue {
    Number(u64),
    Text(String),
}

/// Edits through `jsonc-parser`'s concrete syntax tree.
mod json {
    use super::*;

    fn parse(text: &str) -> Result<CstRootNode, InstallError> {
        CstRootNode::parse(text, &ParseOptions::default()).map_err(|e| InstallError::Parse {
            format: "JSON",
            message: e.to_string(),
        })
    }

    fn group(agent: Agent, command: &str) -> CstInputValue {
        let handler = handler_fields(agent, command)
            .into_iter()
            .map(|(k, v)| {
                let v = match v {
                    HandlerValue::Number(n) => CstInputValue::from(n),
                    HandlerValue::Text(s) => CstInputValue::from(s),
                };
                (k.to_owned(), v)
            })
            .collect();
        CstInputValue::Object(vec![(
            "hooks".into(),
            CstInputValue::Array(vec![CstInputValue::Object(handler)]),
        )])
    }

    /// The root object and its `hooks` object (created when `create`), both already
    /// checked to be objects by `semantic`.
    fn hooks_object(root: &CstRootNode, create: bool) -> Option<CstObject> {
        let doc = if create {
            root.object_value_or_set()
        } else {
            root.object_value()?
        };
        match doc.object_value("hooks") {
            Some(hooks) => Some(hooks),
            None if create => Some(doc.object_value_or_set("hooks")),
            None => None,
        }
    }

    /// Loopguard's handlers in one event's list of matcher groups: the group, its
    /// handler list, the handler, its command.
    fn ours(agent: Agent, groups: &CstArray) -> Vec<(CstObject, CstArray, CstObject, String)> {
        let mut out = Vec::new();
        for group in groups.elements() {
            let Some(group) = group.as_object() else {
                continue;
            };
            let Some(handlers) = group.array_value("hooks") else {
                continue;
            };
            for handler in handlers.elements() {
                let Some(obj) = handler.as_object() else {
                    continue;
                };
                let command = obj
                    .get("command")
                    .and_then(|p| p.value())
                    .and_then(|v| v.as_string_lit())
                    .and_then(|s| s.decoded_value().ok());
                if let Some(command) = command.filter(|c| is_loopguard_command(agent, c)) {
                    out.push((group.clone(), handlers.clone(), obj, command));
                }
            }
        }
        out
    }

    pub(super) fn install(agent: Agent, text: &str, command: &str) -> Result<Edit, InstallError> {
        let root = parse(text)?;
        let hooks = hooks_object(&root, true).expect("created");
        let mut events = Vec::new();
        for &event in agent.events() {
            let change = match hooks.array_value(event) {
                None => {
                    hooks.append(event, CstInputValue::Array(vec![group(agent, command)]));
                    Change::Added
                }
                Some(groups) => {
                    let found = ours(agent, &groups);
                    if found.is_empty() {
                        groups.append(group(agent, command));
                        Change::Added
                    } else if found.iter().all(|(_, _, _, c)| c == command) {
                        Change::Unchanged
                    } else {
                        for (_, _, handler, _) in &found {
                            if let Some(prop) = handler.get("command") {
                                prop.set_value(CstInputValue::from(command));
                            }
                        }
                        Change::Updated
                    }
                }
            };
            events.push((event.to_owned(), change));
        }
        let text = if events.iter().all(|(_, c)| *c == Change::Unchanged) {
            text.to_owned()
        } else {
            root.to_string()
        };
        Ok(Edit { text, events })
    }

    pub(super) fn uninstall(agent: Agent, text: &str) -> Result<Edit, InstallError> {
        let root = parse(text)?;
        let mut events = Vec::new();
        if let Some(hooks) = hooks_object(&root, false) {
            for prop in hooks.properties() {
                let (Some(name), Some(groups)) = (prop.decoded_name(), prop.array_value()) else {
                    continue;
                };
                let found = ours(agent, &groups);
                if found.is_empty() {
                    continue;
                }
                for (group, handlers, handler, _) in found {
                    handler.remove();
                    if handlers.elements().is_empty() {
                        // The matcher group held only loopguard: remove it whole.
                        group.remove();
                    }
                }
                if groups.elements().is_empty() {
                    prop.remove();
                }
                events.push((name, Change::Removed));
            }
            if hooks.properties().is_empty() && !events.is_empty() {
                if let Some(prop) = hooks.parent().and_then(|p| p.as_object_prop()) {
                    prop.remove();
                }
            }
        }
        let text = if events.is_empty() {
            text.to_owned()
        } else {
            root.to_string()
        };
        Ok(Edit { text, events })
    }
}

/// Edits through `toml_edit`, which keeps comments, order and spacing.
mod toml {
    use super::*;

    fn parse(text: &str) -> Result<DocumentMut, InstallError> {
        text.parse()
            .map_err(|e: toml_edit::TomlError| InstallError::Parse {
                format: "TOML",
                message: e.to_string().trim_end().to_owned(),
            })
    }

    fn handler_table(agent: Agent, command: &str) -> Table {
        let mut table = Table::new();
        for (k, v) in handler_fields(agent, command) {
            table[k] = match v {
                HandlerValue::Number(n) => toml_edit::value(i64::try_from(n).unwrap_or(i64::MAX)),
                HandlerValue::Text(s) => toml_edit::value(s),
            };
        }
        table
    }

    fn group_table(agent: Agent, command: &str) -> Table {
        let mut handlers = ArrayOfTables::new();
        handlers.push(handler_table(agent, command));
        let mut group = Table::new();
        group.insert("hooks", Item::ArrayOfTables(handlers));
        group
    }

    /// Calls `f` on the `command` of every loopguard handler of one event.
    fn each_ours(
        agent: Agent,
        groups: &mut Item,
        mut f: impl FnMut(&mut toml_edit::Value),
    ) -> usize {
        let mut n = 0;
        let mut visit = |handler: &mut dyn toml_edit::TableLike| {
            if let Some(command) = handler.get_mut("command").and_then(Item::as_value_mut) {
                if command
                    .as_str()
                    .is_some_and(|c| is_loopguard_command(agent, c))
                {
                    f(command);
                    n += 1;
                }
            }
        };
        for group in tables_mut(groups) {
            if let Some(handlers) = group.get_mut("hooks") {
                for handler in tables_mut(handlers) {
                    visit(handler);
                }
            }
        }
        n
    }

    /// The tables of an array of tables, or of an inline array of inline tables.
    fn tables_mut(item: &mut Item) -> Vec<&mut dyn toml_edit::TableLike> {
        match item {
            Item::ArrayOfTables(a) => a
                .iter_mut()
                .map(|t| t as &mut dyn toml_edit::TableLike)
                .collect(),
            Item::Value(toml_edit::Value::Array(a)) => a
                .iter_mut()
                .filter_map(|v| v.as_inline_table_mut())
                .map(|t| t as &mut dyn toml_edit::TableLike)
                .collect(),
            _ => Vec::new(),
        }
    }

    fn hooks_table(doc: &mut DocumentMut) -> &mut dyn toml_edit::TableLike {
        if !doc.contains_key("hooks") {
            let mut hooks = Table::new();
            // `[[hooks.EVENT]]` headers only, no `[hooks]` of its own.
            hooks.set_implicit(true);
            doc.insert("hooks", Item::Table(hooks));
        }
        doc["hooks"]
            .as_table_like_mut()
            .expect("checked by semantic")
    }

    pub(super) fn install(agent: Agent, text: &str, command: &str) -> Result<Edit, InstallError> {
        let mut doc = parse(text)?;
        let hooks = hooks_table(&mut doc);
        let mut events = Vec::new();
        for &event in agent.events() {
            let change = match hooks.get_mut(event) {
                None => {
                    let mut groups = ArrayOfTables::new();
                    groups.push(group_table(agent, command));
                    hooks.insert(event, Item::ArrayOfTables(groups));
                    Change::Added
                }
                Some(groups) => {
                    let mut differs = false;
                    let found =
                        each_ours(agent, groups, |c| differs |= c.as_str() != Some(command));
                    if found == 0 {
                        match groups {
                            Item::ArrayOfTables(a) => a.push(group_table(agent, command)),
                            Item::Value(toml_edit::Value::Array(a)) => {
                                a.push(group_table(agent, command).into_inline_table())
                            }
                            _ => {
                                return Err(InstallError::Shape {
                                    path: format!("hooks.{event}"),
                                    expected: "an array of tables",
                                    found: "another value",
                                    agent: agent.name(),
                                })
                            }
                        }
                        Change::Added
                    } else if differs {
                        each_ours(agent, groups, |c| {
                            let decor = c.decor().clone();
                            *c = toml_edit::Value::from(command);
                            *c.decor_mut() = decor;
                        });
                        Change::Updated
                    } else {
                        Change::Unchanged
                    }
                }
            };
            events.push((event.to_owned(), change));
        }
        let text = if events.iter().all(|(_, c)| *c == Change::Unchanged) {
            text.to_owned()
        } else {
            doc.to_string()
        };
        Ok(Edit { text, events })
    }

    pub(super) fn uninstall(agent: Agent, text: &str) -> Result<Edit, InstallError> {
        let mut doc = parse(text)?;
        let mut events = Vec::new();
        if let Some(hooks) = doc.get_mut("hooks").and_then(Item::as_table_like_mut) {
            let names: Vec<String> = hooks.iter().map(|(k, _)| k.to_owned()).collect();
            for name in names {
                let Some(groups) = hooks.get_mut(&name) else {
                    continue;
                };
                if each_ours(agent, groups, |_| ()) == 0 {
                    continue;
                }
                let ours = |h: &dyn toml_edit::TableLike| {
                    h.get("command")
                        .and_then(Item::as_str)
                        .is_some_and(|c| is_loopguard_command(agent, c))
                };
                let empty = match groups {
                    Item::ArrayOfTables(a) => {
                        for group in a.iter_mut() {
                            if let Some(Item::ArrayOfTables(h)) = group.get_mut("hooks") {
                                h.retain(|t| !ours(t));
                            } else if let Some(h) =
                                group.get_mut("hooks").and_then(Item::as_array_mut)
                            {
                                h.retain(|v| !v.as_inline_table().is_some_and(|t| ours(t)));
                            }
                        }
                        a.retain(|g| !g.get("hooks").is_some_and(is_empty_list));
                        a.is_empty()
                    }
                    Item::Value(toml_edit::Value::Array(a)) => {
                        for group in a.iter_mut().filter_map(|v| v.as_inline_table_mut()) {
                            if let Some(h) = group
                                .get_mut("hooks")
                                .and_then(toml_edit::Value::as_array_mut)
                            {
                                h.retain(|v| !v.as_inline_table().is_some_and(|t| ours(t)));
                            }
                        }
                        a.retain(|g| {
                            !g.as_inline_table()
                                .and_then(|t| t.get("hooks"))
                                .and_then(toml_edit::Value::as_array)
                                .is_some_and(|h| h.is_empty())
                        });
                        a.is_empty()
                    }
                    _ => false,
                };
                if empty {
                    hooks.remove(&name);
                }
                events.push((name, Change::Removed));
            }
            if hooks.is_empty() && !events.is_empty() {
                doc.remove("hooks");
            }
        }
        let text = if events.is_empty() {
            text.to_owned()
        } else {
            doc.to_string()
        };
        Ok(Edit { text, events })
    }

    fn is_empty_list(item: &Item) -> bool {
        match item {
            Item::ArrayOfTables(a) => a.is_empty(),
            Item::Value(toml_edit::Value::Array(a)) => a.is_empty(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CMD: &str = "/usr/local/bin/loopguard hook claude-code";

    /// A Claude Code user settings file as people have them: permissions, an env, a status
    /// line, hooks of their own on some of loopguard's events (with matchers) and others.
    const CLAUDE: &str = r#"{
  "$schema": "https://json.schemastore.org/claude-code-settings.json",
  "permissions": {
    "allow": [
      "Bash(npm run lint)",
      "Bash(npm run test:*)",
      "Read(~/.zshrc)"
    ],
    "deny": [
      "Bash(curl:*)",
      "Read(./.env)",
      "Read(./secrets/**)"
    ],
    "defaultMode": "acceptEdits"
  },
  "env": {
    "CLAUDE_CODE_ENABLE_TELEMETRY": "0"
  },
  "model": "claude-sonnet-4-5",
  "hooks": {
    "PreToolUse": [
      {
        "matcher": "Bash",
        "hooks": [
          {
            "type": "command",
            "command": "\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/check-bash.sh",
            "timeout": 30
          }
        ]
      }
    ],
    "PostToolUse": [
      {
        "matcher": "Write|Edit|MultiEdit",
        "hooks": [
          {
            "type": "command",
            "command": "npx prettier --write \"$(jq -r '.tool_input.file_path')\""
          }
        ]
      }
    ],
    "Notification": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "notify-send 'Claude Code' 'Awaiting your input'"
          }
        ]
      }
    ]
  },
  "statusLine": {
    "type": "command",
    "command": "~/.claude/statusline.sh"
  }
}
"#;

    fn value(text: &str) -> Value {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn recognizes_its_own_commands() {
        let a = Agent::ClaudeCode;
        assert!(is_loopguard_command(a, CMD));
        assert!(is_loopguard_command(
            a,
            "loopguard hook claude-code --config /x.json5"
        ));
        assert!(is_loopguard_command(
            a,
            "'/my dir/loopguard' hook claude-code"
        ));
        assert!(!is_loopguard_command(
            a,
            "/usr/local/bin/loopguard hook codex"
        ));
        assert!(!is_loopguard_command(a, "/usr/local/bin/loopguard serve"));
        assert!(!is_loopguard_command(a, "echo loopguard hook claude-code"));
        assert!(is_loopguard_command(
            a,
            "/usr/local/bin/loopguard-hook claude-code --db /x.db"
        ));
        assert!(!is_loopguard_command(
            a,
            "/usr/local/bin/loopguard-hook codex"
        ));
        assert!(!is_loopguard_command(a, "loopguard-hook"));
        assert!(!is_loopguard_command(a, "unbalanced 'quote"));
    }

    #[test]
    fn installs_beside_other_hooks_and_uninstalls_byte_for_byte() {
        let a = Agent::ClaudeCode;
        let edit = install(a, Format::Json, CLAUDE, CMD).unwrap();
        assert!(edit.changed());
        assert_eq!(edit.events.len(), a.events().len());
        assert!(edit.events.iter().all(|(_, c)| *c == Change::Added));
        let doc = value(&edit.text);
        // The user's hook is still first; loopguard's group comes after, with no matcher.
        let pre = doc["hooks"]["PreToolUse"].as_array().unwrap();
        assert_eq!(pre.len(), 2);
        assert_eq!(pre[0]["matcher"], "Bash");
        assert_eq!(
            pre[1],
            serde_json::json!({"hooks": [{"type": "command", "command": CMD, "timeout": 10}]})
        );
        assert_eq!(doc["hooks"]["Notification"].as_array().unwrap().len(), 1);
        assert_eq!(doc["hooks"]["SessionEnd"][0]["hooks"][0]["command"], CMD);
        // Everything before `hooks` is byte for byte as it was, keys in their order.
        let head = &CLAUDE[..CLAUDE.find("\"hooks\"").unwrap()];
        assert!(edit.text.starts_with(head));
        assert!(edit.text.ends_with("  \"statusLine\": {\n    \"type\": \"command\",\n    \"command\": \"~/.claude/statusline.sh\"\n  }\n}\n"));
        // Two-space indentation like the rest of the file.
        assert!(
            edit.text
                .contains("\n    \"SessionStart\": [\n      {\n        \"hooks\": [\n"),
            "{}",
            edit.text
        );

        // Again: nothing to do, the text is returned as it is.
        let again = install(a, Format::Json, &edit.text, CMD).unwrap();
        assert!(!again.changed());
        assert_eq!(again.text, edit.text);

        let removed = uninstall(a, Format::Json, &edit.text).unwrap();
        assert_eq!(removed.text, CLAUDE);
        // And once more: nothing of loopguard's is left.
        let none = uninstall(a, Format::Json, &removed.text).unwrap();
        assert!(!none.changed());
        assert_eq!(none.text, CLAUDE);
    }

    #[test]
    fn a_new_binary_or_config_updates_the_command_in_place() {
        let a = Agent::ClaudeCode;
        let first = install(a, Format::Json, CLAUDE, CMD).unwrap();
        let moved = "/opt/bin/loopguard hook claude-code --config /etc/loopguard.json5";
        let edit = install(a, Format::Json, &first.text, moved).unwrap();
        assert!(edit.events.iter().all(|(_, c)| *c == Change::Updated));
        let doc = value(&edit.text);
        assert_eq!(doc["hooks"]["PreToolUse"].as_array().unwrap().len(), 2);
        assert_eq!(doc["hooks"]["PreToolUse"][1]["hooks"][0]["command"], moved);
        assert_eq!(uninstall(a, Format::Json, &edit.text).unwrap().text, CLAUDE);
    }

    #[test]
    fn an_empty_or_missing_file_gets_only_the_hooks() {
        let a = Agent::ClaudeCode;
        for text in ["", "{}\n", "{\n}\n"] {
            let edit = install(a, Format::Json, text, CMD).unwrap();
            let doc = value(&edit.text);
            assert_eq!(doc.as_object().unwrap().len(), 1, "{}", edit.text);
            assert_eq!(doc["hooks"].as_object().unwrap().len(), a.events().len());
        }
    }

    #[test]
    fn a_file_the_agent_cannot_read_is_refused() {
        let a = Agent::ClaudeCode;
        for (text, want) in [
            ("{ \"a\": 1, }", "not valid JSON"),
            ("// comment\n{}", "not valid JSON"),
            ("[1, 2]", "the document is an array"),
            ("{\"hooks\": []}", "hooks is an array"),
        ] {
            let e = install(a, Format::Json, text, CMD).unwrap_err();
            assert!(e.to_string().contains(want), "{text}: {e}");
        }
        let e = install(a, Format::Json, r#"{"hooks": {"PreToolUse": {}}}"#, CMD).unwrap_err();
        assert!(
            matches!(e, InstallError::Check(_) | InstallError::Shape { .. }),
            "{e}"
        );
    }

    #[test]
    fn gemini_settings_keep_their_comments() {
        let a = Agent::Gemini;
        let cmd = "/usr/local/bin/loopguard hook gemini";
        let text = r#"{
  // Gemini CLI user settings
  "general": { "preferredEditor": "vim", "vimMode": true },
  "ui": { "theme": "GitHub" },
  "mcpServers": {
    "github": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"] }
  },
  "hooks": {
    "BeforeTool": [
      {
        "matcher": "write_file|replace",
        "hooks": [
          {
            "name": "secret-scanner",
            "type": "command",
            "command": "$GEMINI_PROJECT_DIR/.gemini/hooks/block-secrets.sh",
            "timeout": 5000, // milliseconds
          },
        ],
      },
    ],
  },
}
"#;
        let edit = install(a, Format::Jsonc, text, cmd).unwrap();
        assert!(edit.text.contains("// Gemini CLI user settings"));
        assert!(edit.text.contains("\"timeout\": 5000, // milliseconds"));
        let doc = CstRootNode::parse(&edit.text, &ParseOptions::default())
            .unwrap()
            .to_serde_value()
            .unwrap();
        let before = doc["hooks"]["BeforeTool"].as_array().unwrap();
        assert_eq!(before.len(), 2);
        assert_eq!(
            before[1]["hooks"][0],
            serde_json::json!({"type": "command", "command": cmd, "name": "loopguard", "timeout": 10000})
        );
        assert_eq!(uninstall(a, Format::Jsonc, &edit.text).unwrap().text, text);
    }

    /// Codex's `config.toml` with inline hooks, the documented form.
    const CODEX_TOML: &str = r#"model = "gpt-5-codex"
approval_policy = "on-request"

[features]
hooks = true

# Policy check before every shell command.
[[hooks.PreToolUse]]
matcher = "^Bash$"

[[hooks.PreToolUse.hooks]]
type = "command"
command = '/usr/bin/python3 "$(git rev-parse --show-toplevel)/.codex/hooks/pre_tool_use_policy.py"'
timeout = 30
statusMessage = "Checking Bash command"

[mcp_servers.docs]
command = "npx"
args = ["-y", "mcp-server-docs"]
"#;

    #[test]
    fn codex_toml_keeps_its_tables_and_comments() {
        let a = Agent::Codex;
        let cmd = "/usr/local/bin/loopguard hook codex";
        let edit = install(a, Format::Toml, CODEX_TOML, cmd).unwrap();
        let doc: Value = toml_edit::de::from_str(&edit.text).unwrap();
        let pre = doc["hooks"]["PreToolUse"].as_array().unwrap();
        assert_eq!(pre.len(), 2);
        assert_eq!(pre[0]["matcher"], "^Bash$");
        assert_eq!(
            pre[1]["hooks"][0],
            serde_json::json!({"type": "command", "command": cmd, "timeout": 10})
        );
        assert_eq!(doc["mcp_servers"]["docs"]["command"], "npx");
        assert!(
            edit.text
                .starts_with(&CODEX_TOML[..CODEX_TOML.find("[mcp_servers").unwrap()]),
            "{}",
            edit.text
        );
        assert!(
            edit.text.contains(
                "[[hooks.SessionStart]]\n\n[[hooks.SessionStart.hooks]]\ntype = \"command\""
            ),
            "{}",
            edit.text
        );
        assert!(!install(a, Format::Toml, &edit.text, cmd).unwrap().changed());
        assert_eq!(
            uninstall(a, Format::Toml, &edit.text).unwrap().text,
            CODEX_TOML
        );
    }

    #[test]
    fn codex_hooks_json_and_where_it_goes() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let none = |_: &str| None;
        let user = settings_dir(Agent::Codex, Scope::User, home, Path::new("/p"), none);
        assert_eq!(user, home.join(".codex"));
        let moved = settings_dir(Agent::Codex, Scope::User, home, Path::new("/p"), |v| {
            (v == "CODEX_HOME").then(|| OsString::from("/srv/codex"))
        });
        assert_eq!(moved, PathBuf::from("/srv/codex"));
        assert_eq!(
            settings_dir(
                Agent::ClaudeCode,
                Scope::Project,
                home,
                Path::new("/p"),
                none
            ),
            PathBuf::from("/p/.claude")
        );
        std::fs::create_dir_all(&user).unwrap();
        // No hooks anywhere: hooks.json.
        assert_eq!(
            settings_file(Agent::Codex, &user),
            (user.join("hooks.json"), Format::Json)
        );
        // Hooks kept in config.toml: there.
        std::fs::write(user.join("config.toml"), CODEX_TOML).unwrap();
        assert_eq!(
            settings_file(Agent::Codex, &user),
            (user.join("config.toml"), Format::Toml)
        );
        // Both: hooks.json wins.
        std::fs::write(user.join("hooks.json"), "{}").unwrap();
        assert_eq!(
            settings_file(Agent::Codex, &user),
            (user.join("hooks.json"), Format::Json)
        );
        assert_eq!(format_of(Agent::Gemini, Path::new("s.json")), Format::Jsonc);
        assert_eq!(format_of(Agent::Codex, Path::new("c.toml")), Format::Toml);
    }
}
