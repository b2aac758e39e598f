// The package's declarations (index.d.ts) as a host uses them, checked by `tsc --noEmit
// --strict` in scripts/test (never run). The closed sets in index.d.ts (detectors, levels,
// masking rules, config blocks) are generated from the engine's own tables
// (crates/loopguard/tests/binding_types.rs); `advice` names every detector, so a detector
// the engine adds fails this check until it is handled here, as a host's exhaustive code
// would have to.
import {
  ALLOW,
  Guard,
  countedFromAnswer,
  verdictFromAnswer,
  type Called,
  type Counted,
  type Detector,
  type GuardConfig,
  type Level,
  type Recorded,
  type Role,
  type Ticket,
  type Verdict,
} from '../index';

function assertNever(value: never): never {
  throw new Error(`unexpected ${String(value)}`);
}

function advice(detector: Detector): string {
  switch (detector) {
    case 'generic_repeat':
    case 'consecutive_repeat':
    case 'stale_repeat':
      return 'the same call again';
    case 'known_poll_no_progress':
      return 'a poll that does not move';
    case 'ping_pong':
    case 'cycle':
      return 'calls going round';
    case 'unknown_tool_repeat':
      return 'a tool that does not exist';
    case 'global_circuit_breaker':
    case 'compaction_loop_persisted':
    case 'escalation':
      return 'the run is stopped';
    case 'error_cascade':
    case 'target_thrash':
      return 'failures piling up';
    case 'batch_duplicates':
      return 'one call twice in a batch';
    case 'run_budget':
    case 'session_budget':
    case 'agent_budget':
    case 'day_budget':
      return 'the money or tokens allowed are spent';
    case 'no_progress_budget':
      return 'spending without getting anywhere';
    case 'repeated_message':
    case 'content_chanting':
    case 'no_tool_turns':
      return 'the model repeating itself';
    case 'run_storm':
      return 'runs of a session ending the same way';
    case 'agent_tree':
      return 'sub-agents spawned past a limit';
    default:
      return assertNever(detector);
  }
}

function severity(level: Level): number {
  switch (level) {
    case 'warning':
      return 1;
    case 'critical':
      return 2;
    default:
      return assertNever(level);
  }
}

const config: GuardConfig = {
  tools: { loopDetection: { enabled: true, warningThreshold: 5, detectors: { pingPong: true } } },
  loopguard: { preset: 'recommended', mode: 'shadow', policy: { tools: [{ match: 'read*', class: 'read' }] } },
  agents: { list: [{ id: 'ops', tools: { loopDetection: { criticalThreshold: 8 } } }] },
  gateway: { port: 18789 },
};
const guard = new Guard(config);
for (const warning of guard.configWarnings) {
  const where: string = warning.line === null ? warning.path : `${warning.line}:${warning.column ?? 0}`;
  console.log(where, warning.message);
}

// The verdict is a tagged union: each branch has the fields of its kind.
function describe(verdict: Verdict): string {
  switch (verdict.verdict) {
    case 'allow':
      return verdict.shadow ? `would ${verdict.shadow.verdict}: ${advice(verdict.shadow.detector)}` : 'fine';
    case 'warn':
      return `${advice(verdict.detector)} (${severity(verdict.level)}): ${verdict.warningNote ?? verdict.message}`;
    case 'block':
      return `${verdict.blockedResult.content[0].text}${verdict.terminal ? ' (run over)' : ''}`;
    default:
      return assertNever(verdict);
  }
}

const ticket: Ticket = guard.begin({ session: 's', run: 'r', tool: 'read', args: { path: 'a' }, callId: 'c1' });
console.log(describe(ticket.verdict), ALLOW.verdict);
if (!ticket.blocked) {
  const recorded: Recorded = ticket.finish({ result: { content: [{ type: 'text', text: 'contents' }] } });
  const end: string | null = recorded.endsRun ?? ticket.endsRun;
  console.log(end);
}

const child: Verdict = guard.beforeCall({ session: 's/agent-1', parentSession: 's', parentRun: 'r', tool: 'read' });
const called: Called<{ ok: boolean }> = guard.call({ session: 's', tool: 'check', args: {} }, () => ({ ok: true }));
if (called.ran) {
  const ok: boolean = called.result.ok;
  console.log(ok, called.recorded.recorded);
} else {
  console.log(called.result.details.detector);
}
async function later(): Promise<void> {
  const done = await guard.call({ session: 's', tool: 'fetch', args: {} }, async () => 'page');
  console.log(done.ran ? done.result.length : done.result.content[0].text);
}
void later();

const fromSidecar: Verdict = verdictFromAnswer({ seq: 1, type: 'call', session: 's', run: null, verdict: 'allow' }, 'read');
console.log(describe(fromSidecar), guard.beforeCall({ tool: 'read' }).verdict, guard.afterCall({ callId: 'c1', result: 1 }).recorded);

const counted: Counted = guard.recordUsage({ session: 's', run: 'r', id: 'resp-1', model: 'gpt-4o', inputTokens: 1200, outputTokens: 300 });
if (counted.stop) console.log(advice(counted.stop.detector), counted.stop.used / counted.stop.limit, counted.endsRun);
console.log(counted.cost ?? 'unpriced', countedFromAnswer('{"type":"usage","counted":true,"cost":null,"stop":null}').stop);
const budgets: GuardConfig = {
  loopguard: {
    budgets: { run: { cost: 2 }, day: { tokens: 5_000_000 }, withoutProgress: { calls: 25 }, warnAt: 0.9, timeZone: '+02:00' },
    prices: { 'my-model': { input: 1, output: 4 } },
  },
};
console.log(new Guard(budgets).configExplain());
const role: Role = 'tool_feedback';
const said: Verdict = guard.message({ session: 's', run: 'r', text: 'No tool calls found.', role });
const piece: Verdict = guard.message({ session: 's', text: 'I will ', delta: true, index: 0, id: 'm1', hasToolCalls: false });
console.log(describe(said), describe(piece));
