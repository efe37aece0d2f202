// Black-box agents (Trinity-RFT's WorkflowWithRecording): a workflow hands any agent program the rollout model's
// OpenAI endpoint — a `baseUrl` and a per-run `apiKey` — runs it, then sets the reward on what was recorded.
//
//   export const myAgent = workflowWithRecording({
//     runAsync: async ({ baseUrl, apiKey, task, updateReward }) => {
//       const answer = await runMyAgent({ OPENAI_BASE_URL: baseUrl, OPENAI_API_KEY: apiKey }, task.prompt);
//       updateReward(answer === task.response ? 1 : 0);       // every experience of the run, or some by sampleIds
//       return { answer_length: answer.length };              // the run's metrics (on each of its experiences)
//     },
//   });
//
// The endpoint is the model handle's rollout server on 127.0.0.1 (EngineModelHandle.serveScope, started once and
// reused by every run: one per explorer, or per worker thread for workflows loaded by module path, ./isolation/).
// A run's key is `sk-run-<128 random bits>`; the server records each chat completion made with it into the run's own
// conversation history, with exact token ids, log-probs and the model version that served it. A call with another
// run's key, a revoked key or none gets 401, so concurrent runs never mix. The key is revoked when runAsync returns
// or throws, or the attempt is aborted (timeout, stop); a call still in flight is cancelled.
//
// The merge rule (../../engine/conversation.ts, Trinity's PrefixExperienceMerger): a call whose messages extend an
// earlier call's messages plus its reply continues that call's exact ids, and the chain becomes ONE experience:
//   tokens     = prompt₁ ++ reply₁ ++ between₁ ++ reply₂ ++ … ++ replyₙ
//   actionMask = 0 on prompt₁ (it is the prompt), 1 on every reply token, 0 on the turns between (tool results,
//                user turns, the template's glue), which the model read but did not write
// A call that extends nothing starts a new experience. Each experience's id (`eid`, the sample id of updateReward) is
// the id of its conversation's last turn, stable across recordedExperiences() calls.
import type { ExperienceInfo, Experience } from '../experience.js';
import { ConversationTracker, type ConversationTurn } from '../../engine/conversation.js';
import { turnExperience } from './model-handle.js';
import type { WorkflowContext, WorkflowSpec } from './types.js';

/** What runAsync gets: the attempt's context, the endpoint to hand the agent, and the reward setter. */
export interface RecordingContext extends WorkflowContext {
  /** The rollout model's OpenAI-compatible endpoint (http://127.0.0.1:<port>/v1): OPENAI_BASE_URL. */
  readonly baseUrl: string;
  /** This run's key (OPENAI_API_KEY): only calls made with it are recorded to this run. */
  readonly apiKey: string;
  /** The model name the endpoint reports (it accepts any name). */
  readonly modelName: string;
  /** The experiences recorded so far (one per conversation), with the rewards set so far. */
  recordedExperiences(): Experience[];
  /**
   * Sets the reward (and extra info fields) of the run's experiences: all of them, or those whose eid is in sampleIds
   * (later calls win). Experiences recorded after the call get an all-run reward too.
   */
  updateReward(reward: number, info?: ExperienceInfo, sampleIds?: readonly string[]): void;
}

export interface WorkflowWithRecording {
  /** Runs the agent; returns the run's metrics (numbers, kept on each of its experiences) or nothing. */
  runAsync(context: RecordingContext): Promise<Record<string, number> | undefined>;
  description?: string;
  workflowArgs?: readonly string[];
  readsPrompt?: boolean;
}

/**
 * A WorkflowSpec from a recording workflow. Not repeatable (Trinity's too): the runner starts repeat_times runs of a
 * task, each with its own key. A run that recorded no call, or left an experience without a reward, fails with a
 * reason saying so (the step goes on).
 */
export function workflowWithRecording(definition: WorkflowWithRecording): WorkflowSpec {
  return {
    repeatable: false,
    ...(definition.description !== undefined ? { description: definition.description } : {}),
    ...(definition.workflowArgs !== undefined ? { workflowArgs: definition.workflowArgs } : {}),
    ...(definition.readsPrompt !== undefined ? { readsPrompt: definition.readsPrompt } : {}),
    run: async (context) => {
      const tokenizer = context.model.tokenizer;
      if (tokenizer === null) throw new Error('workflowWithRecording: the rollout model has no tokenizer, which recording needs');
      const conversation = new ConversationTracker(tokenizer);
      // the run's end (return, throw, timeout, stop) revokes the key and cancels the calls still in flight
      const runEnd = new AbortController();
      const signal = AbortSignal.any([context.signal, runEnd.signal]);
      const served = await context.model.serveScope({ conversation, signal, byApiKey: true });
      const rewards = new RunRewards();
      const experiencesNow = () =>
        conversation.leaves().map((turn) => rewards.apply(leafExperience(turn, context.task.id, context.runIdBase)));
      let metrics: Record<string, number> | undefined;
      try {
        metrics = await definition.runAsync({
          ...context,
          baseUrl: served.baseURL,
          apiKey: served.apiKey as string,
          modelName: served.modelName,
          recordedExperiences: experiencesNow,
          updateReward: (reward, info, sampleIds) => rewards.set(reward, info, sampleIds),
        });
      } finally {
        runEnd.abort(new Error('the recording run has ended')); // a straggling call of the agent: 401, or cancelled
        served.release();
      }
      const experiences = experiencesNow();
      if (experiences.length === 0)
        throw new Error("the agent made no chat completion with the run's API key: nothing was recorded");
      const unknown = rewards.sampleIdsNotIn(experiences);
      if (unknown.length > 0) {
        throw new Error(
          `updateReward named sample ids that are no experience of the run: ${unknown.join(', ')} ` +
            `(an eid is its conversation's last turn; a later call that continued it made a new one)`,
        );
      }
      const unrewarded = experiences.filter((e) => e.reward === undefined).map((e) => e.eid);
      if (unrewarded.length > 0) {
        throw new Error(
          `runAsync set no reward for ${unrewarded.length} of ${experiences.length} recorded experiences ` +
            `(eids ${unrewarded.join(', ')}): call updateReward(reward) for the run, or with their sampleIds`,
        );
      }
      if (metrics) for (const experience of experiences) experience.metrics = { ...experience.metrics, ...metrics };
      return experiences;
    },
  };
}

/** A conversation's experience (its whole history up to its last turn), with the turn's id as eid. */
function leafExperience(turn: ConversationTurn, taskId: string, runId: number): Experience {
  const experience = turnExperience(turn, { taskId, runId });
  experience.eid = turn.id;
  return experience;
}

/** The rewards updateReward set: one for the whole run and per sample id, the latest winning. */
class RunRewards {
  #all: { reward: number; info: ExperienceInfo | undefined; order: number } | null = null;
  readonly #bySample = new Map<string, { reward: number; info: ExperienceInfo | undefined; order: number }>();
  #order = 0;

  set(reward: number, info: ExperienceInfo | undefined, sampleIds: readonly string[] | undefined): void {
    if (!Number.isFinite(reward)) throw new RangeError(`updateReward: reward must be a finite number, got ${String(reward)}`);
    const entry = { reward, info, order: this.#order++ };
    if (sampleIds === undefined) this.#all = entry;
    else for (const id of sampleIds) this.#bySample.set(id, entry);
  }

  sampleIdsNotIn(experiences: readonly Experience[]): string[] {
    const eids = new Set(experiences.map((e) => e.eid));
    return [...this.#bySample.keys()].filter((id) => !eids.has(id));
  }

  apply(experience: Experience): Experience {
    const own = this.#bySample.get(experience.eid);
    const all = this.#all;
    const chosen = own && (!all || own.order > all.order) ? own : all;
    if (chosen === null || chosen === undefined) return experience;
    experience.reward = chosen.reward;
    if (chosen.info) experience.info = { ...experience.info, ...chosen.info };
    return experience;
  }
}
