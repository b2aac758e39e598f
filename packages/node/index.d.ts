/** A JSON value, as JSON.stringify sees it. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json | undefined };

/** Where a call belongs. Every id is optional; a blank id counts as absent. */
export interface Scope {
  /** Session id (`"default"` when absent). */
  session?: string;
  /** Run id: one prompt-to-answer cycle; history is kept per run. */
  run?: string;
  /** Agent id: selects the agent's config block. */
  agent?: string;
}

export interface CallInput extends Scope {
  /** Tool name. */
  tool: string;
  /** Tool arguments (`{}` when absent). */
  args?: Json;
  /** The provider's tool-call id: matches the outcome to its call. */
  callId?: string;
  /** The batch of parallel calls (one assistant message) the call belongs to. */
  batch?: string;
}

export interface OutcomeInput extends Scope {
  /** The call's id. Without `tool`, it must name a pending call. */
  callId?: string;
  /** Tool name; when absent, taken from the pending call `callId` names. */
  tool?: string;
  /** Arguments; when absent, those of the pending call `callId` names. The very object
   * given to `beforeCall` for this call is matched by the fingerprint made then (a change
   * made to it in between is not seen). */
  args?: Json;
  /** What the tool returned. */
  result?: Json;
  /** How the call failed (wins over `result`). */
  error?: Json;
}

export type Detector =
  | 'generic_repeat'
  | 'known_poll_no_progress'
  | 'ping_pong'
  | 'unknown_tool_repeat'
  | 'global_circuit_breaker'
  | 'compaction_loop_persisted'
  | 'consecutive_repeat'
  | 'cycle'
  | 'error_cascade'
  | 'batch_duplicates';

/** What a shadow-mode guard (`loopguard.mode: "shadow"`) would have done. */
export interface ShadowVerdict {
  verdict: 'warn' | 'block';
  level: 'warning' | 'critical';
  detector: Detector;
  count: number;
  message: string;
  terminal: boolean;
  pairedTool: string | null;
}

/** The engine's answer to a call before it runs. */
export interface Verdict {
  /** `block`: do not run the call; give the model `blockedResult` instead. */
  verdict: 'allow' | 'warn' | 'block';
  level: 'warning' | 'critical' | null;
  detector: Detector | null;
  /** The metric that fired (a streak, a repeat count, an alternation length). */
  count: number | null;
  /** What the model reads; names the tool and the count. */
  message: string | null;
  /** For a warning: whether to surface it now (once per multiple of the threshold). */
  notify: boolean;
  /** For a block: the run is over, every later call of it is blocked. */
  terminal: boolean;
  /** For ping-pong: the tool on the other side. */
  pairedTool: string | null;
  /** For a block: the tool result to hand the model in place of running the call. */
  blockedResult: { content: { type: 'text'; text: string }[]; details: Record<string, Json> } | null;
  /** For a warning to surface now: the note to append to the call's result. */
  warningNote: string | null;
  /** Shadow mode only. */
  shadow?: ShadowVerdict;
}

export interface Abort {
  detector: 'compaction_loop_persisted';
  tool: string;
  count: number;
  /** The error the run ends with. */
  message: string;
}

export interface Recorded {
  /** Whether the history changed (false for results of blocked calls). */
  recorded: boolean;
  /** Set when this outcome made the post-compaction guard abort the run. */
  abort: Abort | null;
  /** Shadow mode: the abort that would have happened. */
  shadowAbort?: Abort;
}

export interface ConfigIssue {
  /** Dotted path of the offending key, e.g. `tools.loopDetection.warningThreshold`. */
  path: string;
  line: number | null;
  column: number | null;
  message: string;
}

/** A config document that cannot be used. The message lists every problem, one a line. */
export class ConfigError extends Error {
  name: 'ConfigError';
  code: 'LOOPGUARD_CONFIG';
  /** The file name, when the config came from a file. */
  origin: string | null;
  issues: ConfigIssue[];
}

/** The settings in force for one agent (or globally). */
export interface ConfigExplanation {
  agent: string | null;
  /** Whether the agent has blocks of its own (else the global settings apply). */
  ownBlock: boolean;
  effective: {
    enabled: 'unset' | 'on' | 'off';
    historySize: number;
    warningThreshold: number;
    criticalThreshold: number;
    unknownToolThreshold: number;
    globalCircuitBreakerThreshold: number;
    detectors: { genericRepeat: boolean; knownPollNoProgress: boolean; pingPong: boolean };
    postCompactionWindow: number;
    clamps: { field: string; configured: number; effective: number; reason: string }[];
    unreachable: { field: string; value: number; reason: string }[];
    extensions?: Json;
  };
}

/** The `allow` verdict every unremarkable call gets (one frozen object). */
export const ALLOW: Readonly<Verdict>;

/** The loop guard with its state in memory. Not shared between processes. */
export class Guard {
  /**
   * @param config an OpenClaw-style JSON5 document (any string containing `{`), the path
   *   of such a file, or the parsed object; omitted: defaults (rolling detectors off,
   *   post-compaction guard on). Throws `ConfigError` with every problem.
   */
  constructor(config?: string | Record<string, unknown>);
  /** The verdict on a call about to run. A blocked call must not run. */
  beforeCall(call: CallInput): Verdict;
  /** Records what a call returned or how it failed. */
  afterCall(outcome: OutcomeInput): Recorded;
  /** A compaction retry happened in this run: arms the post-compaction guard; returns the
   * number of attempts it watches (0 when disabled). */
  onCompaction(scope?: Scope): number;
  /** Forgets a run; returns whether it existed. */
  endRun(scope?: Scope): boolean;
  /** Forgets a session and all its runs; returns whether it existed. */
  endSession(session: string): boolean;
  /** The settings in force for `agent`, or the global ones. */
  configExplain(agent?: string): ConfigExplanation;
  /**
   * One event of loopguard's replay protocol (SPEC §7), answered exactly as
   * `loopguard replay` prints it; invalid events are answered `{seq, error}`.
   */
  applyEvent(event: string | Buffer | Record<string, unknown>, seq?: number): Record<string, Json>;
}

/** Every key each config block accepts, by the block's path inside a scope
 * (`tools.loopDetection`, `loopguard.policy.tools[]`, …; `[]` is any array element). */
export function configKeys(): Record<string, string[]>;
