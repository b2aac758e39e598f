//! A call's fingerprints: the args fingerprint, the signature (tool + args) and the rule its
//! outcome will be hashed by.

use serde::{Deserialize, Serialize};

use super::{Fingerprint, Signature};
use crate::canonical::{hash_with, Digest, Filter};
use crate::config::EffectiveConfig;
use crate::json::{Json, Object};
use crate::policy::{self, CallClass, BUILTIN};
use crate::text::trim;

/// The args fingerprint of a call (`update_plan` args reduced to their plan shape first).
pub fn args_fingerprint<'a, J: Json<'a>>(tool: &str, args: J) -> Fingerprint {
    Fingerprint(hash_with(|d| {
        if tool == "update_plan" {
            plan_shape(d, args);
        } else {
            d.value(args);
        }
    }))
}

/// How a call's outcome will be reduced before hashing (SPEC §2 rules 5–9). It depends only
/// on the call (tool and arguments), so it is fixed when the call is made and kept with the
/// record: a result that names its call only by id is hashed the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OutcomeRule {
    pub(super) shape: Shape,
    pub(super) send: bool,
    /// Index of the policy rule that matched the tool ([`NO_RULE`]: none).
    tool_rule: u8,
}

/// [`OutcomeRule`]'s "no policy rule".
const NO_RULE: u8 = u8::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(super) enum Shape {
    Default,
    Exec,
    ProcessPoll,
    ProcessLog,
    UpdatePlan,
}

impl OutcomeRule {
    /// The rule of no call (what a ticket resumed by an unknown id holds).
    pub(crate) const NONE: Self = Self {
        shape: Shape::Default,
        send: false,
        tool_rule: NO_RULE,
    };

    /// The rule for a call of `tool` (trimmed) with `args`.
    pub fn for_call<'a, J: Json<'a>>(tool: &str, args: J) -> Self {
        Self::with_class(tool, args, BUILTIN.classify(tool, args))
    }

    fn with_class<'a, J: Json<'a>>(tool: &str, args: J, class: CallClass) -> Self {
        let shape = match tool {
            "exec" => Shape::Exec,
            "process" => match policy::action(args) {
                Some("poll") => Shape::ProcessPoll,
                Some("log") => Shape::ProcessLog,
                _ => Shape::Default,
            },
            "update_plan" => Shape::UpdatePlan,
            _ => Shape::Default,
        };
        Self {
            shape,
            send: class.send,
            tool_rule: NO_RULE,
        }
    }

    /// Whether outcomes are hashed as an outbound send's (volatile ids stripped).
    pub fn is_send(self) -> bool {
        self.send
    }

    /// The index of the policy rule that matched the call's tool.
    pub fn tool_rule(self) -> Option<u8> {
        (self.tool_rule != NO_RULE).then_some(self.tool_rule)
    }
}

/// A call reduced to what the engine needs: computed once, used by the verdict and by the
/// outcome that follows.
#[derive(Clone, Copy, Debug)]
pub struct CallPrint<'a> {
    /// The tool name, trimmed.
    pub tool: &'a str,
    /// Fingerprint of the (normalized) arguments.
    pub args: Fingerprint,
    /// Tool + args.
    pub signature: Signature,
    /// How the outcome will be hashed.
    pub rule: OutcomeRule,
    /// Whether this is a known polling call.
    pub known_poll: bool,
    /// What the call works on (a path, a URL), when the `loopguard` block's
    /// `targetThrash` or `errorCascade` is on and an argument names one.
    pub target: Option<&'a str>,
}

impl<'a> CallPrint<'a> {
    /// Fingerprints a call with SPEC's built-in tables. `tool` is trimmed here.
    pub fn new<'j, J: Json<'j>>(tool: &'a str, args: J) -> Self {
        let tool = trim(tool);
        let args_fp = args_fingerprint(tool, args);
        let class = BUILTIN.classify(tool, args);
        Self {
            tool,
            args: args_fp,
            signature: Signature::new(tool, args_fp),
            rule: OutcomeRule::with_class(tool, args, class),
            known_poll: class.known_poll,
            target: None,
        }
    }

    /// Fingerprints a call under a config: its `loopguard` tool policy, when there is one,
    /// classifies the tool and leaves ignored argument keys out.
    pub fn for_config<J: Json<'a>>(tool: &'a str, args: J, cfg: &EffectiveConfig) -> Self {
        let Some(ext) = cfg.extensions.as_deref() else {
            return Self::new(tool, args);
        };
        let tool = trim(tool);
        let classified = ext.policy.classify(tool, args);
        let ignore = classified
            .rule
            .and_then(|i| ext.policy.rule(i))
            .map(|r| &r.ignore_args)
            .filter(|p| !p.is_empty());
        let args_fp = match ignore {
            Some(paths) if tool != "update_plan" => Fingerprint(hash_with(|d| {
                d.value_filtered(
                    args,
                    Filter {
                        ignore: Some(paths),
                        ..Filter::KEEP
                    },
                )
            })),
            _ => args_fingerprint(tool, args),
        };
        let mut rule = OutcomeRule::with_class(tool, args, classified.class);
        rule.tool_rule = classified.rule.unwrap_or(NO_RULE);
        // `target_thrash` counts failures per target; `error_cascade` ends a run at a
        // success on the target of one of its failures.
        let target = (ext.target_thrash.is_some() || ext.error_cascade.is_some())
            .then(|| ext.policy.target(classified.rule, args))
            .flatten();
        Self {
            tool,
            args: args_fp,
            signature: Signature::new(tool, args_fp),
            rule,
            known_poll: classified.class.known_poll,
            target,
        }
    }
}

/// Encodes the plan shape of a value (SPEC §2): non-objects as themselves.
fn plan_shape<'a, J: Json<'a>>(d: &mut Digest, value: J) {
    match value.as_object() {
        Some(map) => plan_shape_of_map(d, Some(map)),
        None => d.value(value),
    }
}

/// `{planLength, statuses, stepPresence, hasExplanation}` of an object (`None` = `{}`).
pub(super) fn plan_shape_of_map<'a, O: Object<'a>>(d: &mut Digest, map: Option<O>) {
    let plan = map.and_then(|m| m.get("plan")).and_then(Json::as_array);
    let explanation = map
        .and_then(|m| m.get("explanation"))
        .and_then(Json::as_string)
        .and_then(|s| s.non_blank())
        .is_some();
    let len = plan.clone().map_or(0, |p| p.len());
    let entry = |e: O::Value, key: &str| {
        e.as_object()
            .and_then(|e| e.get(key))
            .and_then(Json::as_string)
    };
    d.object(4);
    d.key("hasExplanation");
    d.bool(explanation);
    d.key("planLength");
    d.int(len as i128);
    d.key("statuses");
    d.array(len);
    for e in plan.clone().into_iter().flatten() {
        match entry(e, "status") {
            Some(status) => d.string(status),
            None => d.null(),
        }
    }
    d.key("stepPresence");
    d.array(len);
    for e in plan.into_iter().flatten() {
        d.bool(entry(e, "step").and_then(|s| s.non_blank()).is_some());
    }
}
