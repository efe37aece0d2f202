// simple_mm_workflow (src/rft/workflow/simple-mm.ts), Trinity's SimpleMMWorkflow: over a rollout backend that writes
// chosen answers for a tiny random Qwen2.5-VL's tokenizer and image processor, a task whose prompt holds an image
// (format.image_key) is sent as [system: MM_SYSTEM_PROMPT, user: image + text] with the image's placeholder expanded
// to its 4 tokens and the image passed with the ids; every experience keeps the image; the default reward is
// math_boxed_reward (accuracy of the last \boxed{}); a task's reward function and system prompt replace the defaults;
// async_simple_mm_workflow is the same workflow.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { GenerateRequest, GenerateResult } from '../../../src/engine/index.js';
import { encodePng, imageDataUrl, initVisionLanguageModel, loadImageProcessorConfig } from '../../../src/model/index.js';
import type { Task } from '../../../src/rft/task.js';
import { EngineModelHandle, WORKFLOWS, WorkflowRunner } from '../../../src/rft/workflow/index.js';
import { MM_SYSTEM_PROMPT } from '../../../src/rft/workflow/simple-mm.js';
import { Tokenizer } from '../../../src/tokenizer/index.js';
import { ScriptedBackend } from './scripted-backend.js';

let dir = '';
let tokenizer: Tokenizer;
let imageTokenId = 0;
let image = '';
before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'simple-mm-'));
  // the processor's bounds keep a 56 x 56 image as it is: a 4 x 4 patch grid, 2 x 2 merged, 4 image tokens
  const raw = initVisionLanguageModel(dir, { hiddenSize: 16, numLayers: 1, numHeads: 2, minPixels: 56 * 56, maxPixels: 56 * 56 });
  imageTokenId = raw.image_token_id as number;
  tokenizer = Tokenizer.load(dir);
  const png = await encodePng({ data: new Uint8Array(56 * 56 * 3).fill(90), height: 56, width: 56, channels: 3 });
  image = await imageDataUrl(png, 'test image');
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** A scripted vision-language backend (answers[i] for the i-th sample) that keeps each request it was sent. */
function backend(answers: readonly string[]): { backend: ScriptedBackend; requests: GenerateRequest[] } {
  const requests: GenerateRequest[] = [];
  const scripted = new ScriptedBackend(tokenizer, (_prompt, i) => answers[i] as string);
  const generate = scripted.generate.bind(scripted);
  scripted.generate = (request: GenerateRequest): Promise<GenerateResult> => {
    requests.push(request);
    return generate(request);
  };
  Object.assign(scripted, { vision: { imageTokenId, processor: loadImageProcessorConfig(dir) } });
  return { backend: scripted, requests };
}

/** A geometry3k-like task as the taskset makes it with format.image_key: the image before the prompt's text. */
const task = (overrides: Partial<Task> = {}): Task => ({
  id: 'g1',
  taskset: 'geometry3k',
  index: 0,
  raw: {},
  messages: [
    {
      role: 'user',
      content: [
        { type: 'image_url', image_url: { url: image } },
        { type: 'text', text: 'How many sides does the figure have?' },
      ],
    },
  ],
  response: '3',
  workflow: 'simple_mm_workflow',
  ...overrides,
});

async function run(answers: readonly string[], t: Task) {
  const { backend: scripted, requests } = backend(answers);
  const runner = new WorkflowRunner({
    models: new EngineModelHandle(scripted),
    retryBackoffMs: 1,
    maxRetryTimes: 0,
    maxTimeout: 60,
  });
  try {
    const result = await runner.runStep([t], { step: 1, repeatTimes: answers.length });
    assert.deepEqual(
      result.statuses.map((s) => s.error ?? 'ok'),
      ['ok'],
    );
    return { experiences: result.experiences, requests, prompts: scripted.prompts };
  } finally {
    runner.close();
  }
}

describe('simple_mm_workflow', () => {
  test("the image goes to the engine after the system prompt, experiences keep it; math_boxed_reward's accuracy by default", async () => {
    const { experiences, requests, prompts } = await run(['so \\boxed{3}', '4'], task());
    assert.equal(requests.length, 1, 'the repeats are one call');
    assert.equal(requests[0]?.n, 2);
    // sent decoded once (DecodedImage: the pixels with their data URL), not decoded again by the engine
    const sent = (requests[0]?.images ?? []).map((source) =>
      typeof source === 'object' && 'dataUrl' in source ? source.dataUrl : source,
    );
    assert.deepEqual(sent, [image], 'the image is sent with the prompt ids');
    const prompt = prompts[0] as string;
    assert.ok(prompt.startsWith(`<|im_start|>system\n${MM_SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n`), prompt);
    assert.ok(
      prompt.includes(`<|vision_start|>${'<|image_pad|>'.repeat(4)}<|vision_end|>How many sides`),
      'the placeholder expanded to the image',
    );
    assert.deepEqual(
      experiences.map((e) => e.reward),
      [1, 0],
    );
    assert.deepEqual(experiences[0]?.metrics, { accuracy: 1, format_score: 0 });
    for (const experience of experiences) {
      assert.deepEqual(experience.images, [image], 'the trainer recomputes log-probs over the same pixels');
      const promptIds = experience.tokens.slice(0, experience.promptLength);
      assert.equal(promptIds.filter((id) => id === imageTokenId).length, 4);
    }
  });

  test("a task's reward function and system prompt replace the defaults", async () => {
    const { experiences, prompts } = await run(
      ['the answer is 3', '\\boxed{4}'],
      task({ rewardFn: 'accuracy_reward', systemPrompt: 'Count.' }),
    );
    assert.ok(prompts[0]?.startsWith('<|im_start|>system\nCount.<|im_end|>'), prompts[0]);
    assert.deepEqual(
      experiences.map((e) => e.reward),
      [1, 0],
      "accuracy_reward reads 'answer is 3'; math_boxed_reward would not",
    );
  });

  test('a task without images is a text prompt', async () => {
    const { experiences, requests } = await run(['\\boxed{3}'], task({ messages: undefined, prompt: 'How many?' }));
    assert.equal(requests[0]?.images, undefined);
    assert.equal(experiences[0]?.images, undefined);
    assert.equal(experiences[0]?.reward, 1);
  });

  test("async_simple_mm_workflow is the same workflow; workflow_args are reported, not read (Trinity's drop them)", async () => {
    assert.equal((await WORKFLOWS.resolve('async_simple_mm_workflow')).run, WORKFLOWS.get('simple_mm_workflow').run);
    const spec = WORKFLOWS.get('simple_mm_workflow');
    assert.deepEqual(spec.workflowArgs, []);
    assert.match(spec.ignoredWorkflowArgs ?? '', /reads no workflow_args.*reward_fn_args/);
  });
});
