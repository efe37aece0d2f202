// Trinity-RFT's workflow and reward names that have no module of their own here (src/rft/workflow/trinity-names.ts,
// src/rft/reward/trinity-names.ts): an async twin is the same workflow, and the others are refused with why and what
// to use instead — never as an unknown name with a list to guess from.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { REWARD_FUNCTIONS } from '../../../src/rft/reward/registry.js';
import { UNAVAILABLE_REWARDS } from '../../../src/rft/reward/trinity-names.js';
import { WORKFLOWS } from '../../../src/rft/workflow/registry.js';
import { UNAVAILABLE_WORKFLOWS } from '../../../src/rft/workflow/trinity-names.js';

describe("Trinity's workflow names", () => {
  test('the async twins are the built-in workflows under their other names', async () => {
    for (const [twin, name] of [
      ['async_simple_workflow', 'simple_workflow'],
      ['async_math_workflow', 'math_workflow'],
      ['async_math_boxed_workflow', 'math_boxed_workflow'],
    ]) {
      assert.equal((await WORKFLOWS.resolve(twin as string)).run, WORKFLOWS.get(name as string).run, twin);
    }
  });

  test('an environment that needs a Python simulator is refused naming the simulator and what to do instead', async () => {
    await assert.rejects(WORKFLOWS.resolve('alfworld_workflow'), (error: Error) => {
      assert.match(error.message, /^workflow 'alfworld_workflow' is not available here: needs ALFWorld/);
      assert.match(error.message, /Python simulator/);
      assert.match(error.message, /household_workflow is an ALFWorld-style household built in/);
      assert.match(error.message, /workflowWithRecording .*examples\/blackbox_agent.*mode serve/);
      return true;
    });
    for (const [name, simulator] of [
      ['webshop_workflow', /WebShop/],
      ['sciworld_workflow', /ScienceWorld/],
      ['intercode_sql_workflow', /InterCode/],
    ] as const) {
      assert.throws(
        () => WORKFLOWS.get(name),
        (error: Error) => {
          assert.match(error.message, simulator);
          assert.match(error.message, /a workflow file named by its module path \(`env\.ts#workflow`/);
          assert.match(error.message, /workflowWithRecording/);
          return true;
        },
      );
    }
    assert.throws(
      () => WORKFLOWS.get('bcp_simple_react_workflow'),
      /tool_agent_workflow runs a multi-turn agent over tools .*workflowWithRecording/,
    );
    // the email example's database is read here (agents/email-search.ts): its workflow is no longer refused
    assert.match(WORKFLOWS.describe('email_search_workflow'), /^email_search: search_emails/);
  });

  test('every refusal says what to use here: a registered workflow, a module-path workflow, or a recorded agent', () => {
    const registered = WORKFLOWS.names();
    for (const [name, reason] of UNAVAILABLE_WORKFLOWS) {
      const named = registered.some((workflow) => reason.includes(workflow));
      assert.ok(named || /workflowWithRecording|mode serve|#workflow/.test(reason), `${name}: ${reason}`);
    }
  });

  test("math_ruler_workflow is math_workflow's prompt with the RULER reward (Trinity's MathRULERWorkflow)", () => {
    for (const name of ['math_ruler_workflow', 'async_math_ruler_workflow']) {
      assert.equal(WORKFLOWS.describe(name), 'single-turn: chat template + reply prefix, n samples, reward ruler_reward');
    }
  });

  test("math_rm_workflow (v0.6: MathOpenJudgeWorkflow) is simple_workflow: the prompt as it is, the taskset's reward", () => {
    for (const name of ['math_rm_workflow', 'async_math_rm_workflow']) {
      assert.equal(WORKFLOWS.describe(name), WORKFLOWS.describe('simple_workflow'));
      assert.equal(
        WORKFLOWS.describe(name),
        "single-turn: chat template + reply prefix, n samples, reward from the task's reward_fn",
      );
    }
  });

  test('the judge workflow over an external API names the auxiliary model setting that does its job here', () => {
    assert.throws(
      () => WORKFLOWS.get('rubric_judge_openai_workflow'),
      /rubric_judge_workflow with explorer.auxiliary_models' first entry engine_type: openai/,
    );
  });

  test('every refused name is not registered, and its message says why (no "unknown")', () => {
    for (const [name] of UNAVAILABLE_WORKFLOWS) {
      if (WORKFLOWS.has(name)) continue; // implemented since: the registration took over
      assert.throws(
        () => WORKFLOWS.get(name),
        (error: Error) => {
          assert.ok(error.message.startsWith(`workflow '${name}' is not available here: `), error.message);
          return true;
        },
      );
    }
  });
});

describe("Trinity's reward names", () => {
  test('are refused with what to use instead', () => {
    assert.throws(() => REWARD_FUNCTIONS.get('openjudge_reward'), /OpenJudge \/ RM-Gallery/);
    for (const [name] of UNAVAILABLE_REWARDS) {
      if (REWARD_FUNCTIONS.has(name)) continue;
      assert.throws(() => REWARD_FUNCTIONS.get(name), new RegExp(`^Error: reward function '${name}' is not available here: `));
    }
  });
});
