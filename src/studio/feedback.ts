// Human feedback, built in (Trinity-RFT does this through Label Studio). Three ways a person's judgement reaches
// training, each through a path that already exists:
//
//   serve mode    the Studio asks the serve-mode endpoint (src/serve/serve-stage.ts) for answers to a prompt and
//                 posts each rating to its POST /feedback {response_id, choice_index, reward}: the reward lands in
//                 the run's experience buffer exactly as an agent's would
//   DPO file      "A is better than B" appends {prompt, chosen, rejected} to a JSONL file inside the runs folder,
//                 the format src/rft/buffer/dataset.ts reads for a DPO stage (experience_buffer storage_type file)
//   annotation    the task pipeline's human_preference_annotation_mapper serves GET /annotations and
//                 POST /annotations/<id>; it announces itself in annotation_server.json in its work folder, which
//                 the Studio finds in its runs folder
//
// The Studio calls those servers for the browser (its pages may only talk to the Studio). It only calls loopback
// addresses, or an address an annotation_server.json in its runs folder names: a Studio is no proxy to elsewhere.
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { isLoopbackHost } from '../openai/server.js';
import { ANNOUNCEMENT_FILE } from '../rft/data/task-pipeline/operators/index.js';
import { readJson, relativeToRoot, writeTarget } from './body.js';
import { countLinesUnderRoot, readTextUnderRoot, writeUnderRoot } from './paths.js';
import { HttpError, query, type Route } from './router.js';

/** How long a call to a serve or annotation server may take (a generation on a small model is seconds). */
const CALL_TIMEOUT_MS = 120_000;
/** How deep below the runs folder annotation_server.json is looked for (job/…/task_pipeline/ is 3 or 4). */
const ANNOUNCEMENT_DEPTH = 5;
/** The most bytes of an annotation_server.json read (a line of JSON). */
const MAX_ANNOUNCEMENT_BYTES = 64 * 1024;

export interface AnnotationServer {
  /** The announcement file, relative to the runs folder. */
  file: string;
  url: string;
  operator: string;
  total: number;
}

/** Annotation servers announced in the runs folder (annotation_server.json files). */
export async function findAnnotationServers(root: string): Promise<AnnotationServer[]> {
  const found: AnnotationServer[] = [];
  const visit = async (dir: string, depth: number): Promise<void> => {
    let entries: import('node:fs').Dirent[];
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) {
      if (entry.isFile() && entry.name === ANNOUNCEMENT_FILE) {
        try {
          const text = await readTextUnderRoot(root, join(dir, entry.name), MAX_ANNOUNCEMENT_BYTES);
          const value = JSON.parse(text) as Partial<AnnotationServer>;
          if (typeof value.url === 'string')
            found.push({
              file: relativeToRoot(root, join(dir, entry.name)),
              url: value.url,
              operator: String(value.operator ?? ''),
              total: Number(value.total ?? 0),
            });
        } catch {
          // being written, or removed as its server closed
        }
      } else if (entry.isDirectory() && depth < ANNOUNCEMENT_DEPTH && !entry.name.startsWith('.') && entry.name !== 'checkpoints')
        await visit(join(dir, entry.name), depth + 1);
    }
  };
  await visit(root, 0);
  return found;
}

/** `text` as a server URL the Studio may call: http(s), loopback or announced in the runs folder; no trailing '/'. */
async function allowedUrl(root: string, text: string): Promise<string> {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new HttpError(400, `'${text}' is not a URL (e.g. http://127.0.0.1:8010)`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new HttpError(400, `'${text}': only http:// and https:// servers`);
  const base = `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
  if (isLoopbackHost(url.hostname)) return base;
  if ((await findAnnotationServers(root)).some((s) => s.url.replace(/\/+$/, '') === base)) return base;
  throw new HttpError(
    403,
    `'${text}' is not on this machine (loopback) nor announced in the runs folder: the Studio does not call other hosts`,
  );
}

/** Calls a server; its JSON answer, or an HttpError carrying its status and message. */
async function call(url: string, init: { method: 'GET' | 'POST'; body?: unknown; apiKey?: string }): Promise<unknown> {
  let response: Response;
  try {
    response = await fetch(url, {
      method: init.method,
      headers: {
        ...(init.body !== undefined ? { 'content-type': 'application/json' } : {}),
        ...(init.apiKey ? { authorization: `Bearer ${init.apiKey}` } : {}),
      },
      ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
      signal: AbortSignal.timeout(CALL_TIMEOUT_MS),
    });
  } catch (error) {
    throw new HttpError(502, `${init.method} ${url}: ${(error as Error).message} (is the server running?)`);
  }
  const text = await response.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: its text is the message
  }
  if (!response.ok) {
    const error = (body as { error?: unknown } | null)?.error;
    const message = typeof error === 'string' ? error : ((error as { message?: string } | undefined)?.message ?? text);
    throw new HttpError(response.status === 401 || response.status === 403 ? 502 : response.status, `${url}: ${message}`);
  }
  return body;
}

const ServeBase = { url: z.string().min(1).max(2000), apiKey: z.string().max(1000).optional() };
const GenerateBody = z.strictObject({
  ...ServeBase,
  prompt: z.string().min(1).max(100_000),
  n: z.number().int().min(1).max(8).default(2),
  maxTokens: z.number().int().min(1).max(65_536).optional(),
  temperature: z.number().min(0).max(100).optional(),
});
const RewardBody = z.strictObject({
  ...ServeBase,
  responseId: z.string().min(1),
  choiceIndex: z.number().int().min(0),
  reward: z.number().refine(Number.isFinite, 'must be a finite number'),
});
const PreferenceBody = z.strictObject({
  file: z.string().min(1).max(500),
  prompt: z.string().min(1),
  chosen: z.string(),
  rejected: z.string(),
});
const AnnotateBody = z.strictObject({
  url: z.string().min(1).max(2000),
  id: z.string().min(1).max(100),
  preferred: z.enum(['answer1', 'answer2']),
});

interface ChatAnswer {
  id: string;
  choices: { index: number; message: { content: string | null } }[];
}

export const feedbackRoutes: Route[] = [
  {
    method: 'POST',
    path: '/api/feedback/serve/generate',
    description: "{url, apiKey?, prompt, n}: the serve-mode endpoint's answers to a prompt (recorded there, awaiting rewards)",
    handle: async ({ req, studio }) => {
      const body = await readJson(req, GenerateBody);
      const base = await allowedUrl(studio.root, body.url);
      const apiKey = body.apiKey || undefined;
      const models = (await call(`${base}/v1/models`, { method: 'GET', ...(apiKey ? { apiKey } : {}) })) as {
        data?: { id: string }[];
      };
      const model = models.data?.[0]?.id;
      if (model === undefined) throw new HttpError(502, `${base}/v1/models lists no model`);
      const answer = (await call(`${base}/v1/chat/completions`, {
        method: 'POST',
        ...(apiKey ? { apiKey } : {}),
        body: {
          model,
          messages: [{ role: 'user', content: body.prompt }],
          n: body.n,
          ...(body.maxTokens !== undefined ? { max_tokens: body.maxTokens } : {}),
          ...(body.temperature !== undefined ? { temperature: body.temperature } : {}),
        },
      })) as ChatAnswer;
      return {
        responseId: answer.id,
        model,
        prompt: body.prompt,
        answers: answer.choices.map((c) => ({ choiceIndex: c.index, text: c.message.content ?? '' })),
      };
    },
  },
  {
    method: 'POST',
    path: '/api/feedback/serve/reward',
    description: "{url, apiKey?, responseId, choiceIndex, reward}: a rating as the serve-mode endpoint's POST /feedback",
    handle: async ({ req, studio }) => {
      const body = await readJson(req, RewardBody);
      const base = await allowedUrl(studio.root, body.url);
      return call(`${base}/feedback`, {
        method: 'POST',
        ...(body.apiKey ? { apiKey: body.apiKey } : {}),
        body: { response_id: body.responseId, choice_index: body.choiceIndex, reward: body.reward },
      });
    },
  },
  {
    method: 'POST',
    path: '/api/feedback/preference',
    description: '{file, prompt, chosen, rejected}: appends a DPO pair to <runs>/<file> (.jsonl)',
    handle: async ({ req, studio }) => {
      const { file, prompt, chosen, rejected } = await readJson(req, PreferenceBody);
      if (chosen === rejected) throw new HttpError(400, 'chosen and rejected are the same text: nothing to prefer');
      const target = writeTarget(studio.root, file, ['.jsonl']);
      const path = writeUnderRoot(studio.root, target, `${JSON.stringify({ prompt, chosen, rejected })}\n`, { append: true });
      return { file: relativeToRoot(studio.root, path), pairs: await countLinesUnderRoot(studio.root, path) };
    },
  },
  {
    method: 'GET',
    path: '/api/feedback/annotation-servers',
    description: 'annotation servers (human_preference_annotation_mapper) announced in the runs folder',
    handle: ({ studio }) => findAnnotationServers(studio.root),
  },
  {
    method: 'GET',
    path: '/api/feedback/annotations',
    description: "an annotation server's pending pairs (?url): its GET /annotations",
    handle: async ({ url, studio }) => {
      const base = await allowedUrl(studio.root, query.required(url, 'url'));
      return call(`${base}/annotations`, { method: 'GET' });
    },
  },
  {
    method: 'POST',
    path: '/api/feedback/annotations',
    description: '{url, id, preferred}: rates a pair on an annotation server (its POST /annotations/<id>)',
    handle: async ({ req, studio }) => {
      const body = await readJson(req, AnnotateBody);
      const base = await allowedUrl(studio.root, body.url);
      return call(`${base}/annotations/${encodeURIComponent(body.id)}`, {
        method: 'POST',
        body: { preferred: body.preferred },
      });
    },
  },
];
