// The `trinity` command line.
import { setMaxListeners } from 'node:events';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const HELP = `trinity — reinforcement fine-tuning of LLMs in TypeScript

Usage:
  trinity run --config FILE [--set k=v]...     run an RFT job (all its stages; the same command resumes it)
  trinity bench --config FILE [--set k=v]...   evaluate the base model and every checkpoint on the eval tasksets
  trinity config check FILE [--set k=v]...     validate a config and print it resolved
  trinity report JOB_DIR [--out FILE]          write an HTML report (charts, accuracy, sample answers) of a run
  trinity studio [--runs DIR] [--port P]       a web app to watch runs live: curves, rollouts, buffers
  trinity serve --model DIR [options]          serve a model folder over the OpenAI API (/v1/chat/completions ...)
  trinity quickstart [--seed N] [--threads N]  the quickstart: a small model learns addition (SFT, then GRPO)
  trinity model init DIR [options]      create a randomly initialised Qwen2/Qwen3/Llama model folder (HF format)
  trinity model convert SRC DST [opts]  re-save a model folder: another dtype, shard size, or a LoRA adapter merged in
  trinity buffer view PATH [options]    print experiences from a buffer (.db SQLite or .jsonl)
  trinity email-db DATASET --out FILE   write email_search_workflow's Enron email database from the dataset on disk
  trinity demo [--steps N] [--seed S]   train a tiny transformer with the tensor core; prints the loss falling
  trinity info                          libtorch version, threads, CUDA devices
  trinity --help                        this text

Run a command with --help for its options.
`;

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === undefined || command === '--help' || command === '-h' || command === 'help') {
    process.stdout.write(HELP);
    return command === undefined ? 1 : 0;
  }
  if (command === 'demo') {
    const { values } = parseArgs({
      args: rest,
      options: { steps: { type: 'string', default: '200' }, seed: { type: 'string', default: '0' }, help: { type: 'boolean' } },
    });
    if (values.help) {
      process.stdout.write(
        'trinity demo [--steps N] [--seed S]\n  Trains a one-block causal transformer on a character corpus; prints the loss.\n',
      );
      return 0;
    }
    const steps = Number(values.steps);
    const seed = Number(values.seed);
    if (!Number.isInteger(steps) || steps < 1) throw new Error(`--steps must be a positive integer, got '${values.steps}'`);
    const { runDemo } = await import('./demo.js');
    const started = Date.now();
    const { first, last } = runDemo({ steps, seed, log: (line) => console.log(line) });
    console.log(`loss ${first.toFixed(3)} -> ${last.toFixed(3)} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    return last < first ? 0 : 1;
  }
  if (command === 'model') return modelCommand(rest);
  if (command === 'serve') return serveCommand(rest);
  if (command === 'run' || command === 'bench') return runCommand(command, rest);
  if (command === 'report') {
    const { reportCommand } = await import('./report-command.js');
    return reportCommand(rest);
  }
  if (command === 'studio') return (await import('./studio-command.js')).studioCommand(rest);
  if (command === 'quickstart') return quickstartCommand(rest);
  if (command === 'config') {
    const { configCommand } = await import('./config-command.js');
    return configCommand(rest);
  }
  if (command === 'buffer') {
    const { bufferCommand } = await import('./buffer-command.js');
    return bufferCommand(rest);
  }
  if (command === 'email-db') return (await import('./email-db-command.js')).emailDbCommand(rest);
  if (command === 'info') {
    const torch = await import('../torch/index.js');
    const info = torch.buildInfo();
    console.log(
      `libtorch ${info.torchVersion}; intra-op threads ${torch.getNumThreads()}; CUDA devices ${torch.cuda.deviceCount()}`,
    );
    console.log(info.parallel.trim());
    return 0;
  }
  process.stderr.write(`trinity: unknown command '${command}'\n\n${HELP}`);
  return 2;
}

const RUN_HELP = `trinity run --config FILE [--set key=value]...
trinity bench --config FILE [--set key=value]...
  Runs the job a YAML config describes (Trinity-RFT's keys: mode, model, algorithm, buffer, explorer, trainer,
  synchronizer, monitor, stages). Checkpoints, metrics (metrics.jsonl, TensorBoard) and the final model go to
  checkpoint_root_dir/project/name. Running the same command again resumes from the latest checkpoint and skips
  finished stages. Ctrl-C (exit code 130) or SIGTERM (143) stops cleanly: run the same command to resume.
  A run that cannot fill its train steps (every rollout failed, was rejected or filtered out: 3 train steps in a
  row, or every step it ran) fails with exit code 1, naming the cause and the last rollout failures; a finished
  run prints how many steps it trained of how many asked. One run at a time per job folder (<job>/run.lock): a
  second one fails at once naming the owner's pid and host; a killed run's lock does not block the next.
  "trinity bench" is the same with mode bench; after a finished run it benchmarks that run's checkpoints.

  --config FILE          the YAML config
  --set key.path=value   override a key (repeatable), e.g. --set buffer.batch_size=8 --set stages.0.mode=train
  --nproc-per-node N     run: train data-parallel on N ranks on this machine (Gloo on CPU): starts N copies of
                         this command with the torchrun environment below, a free MASTER_PORT unless set, their
                         output prefixed "[rankR]: "; if one fails the others stop (their collectives fail, within
                         trainer.distributed_timeout, then SIGTERM); exits with the first failure's code
  --nnodes N             run: the ranks span N machines, each running this command with --nproc-per-node M
                         (default 1) and its own --node-rank; rank = node rank * M + local rank
  --node-rank K          this machine's index, 0..N-1 (required with --nnodes > 1)
  --master-addr A        node 0's address, where rank 0 serves the rendezvous (required with --nnodes > 1)
  --master-port P        its port (default MASTER_PORT, else a free port on one node, 29500 on several)

Data-parallel training: run under torchrun, Slurm or Kubernetes unchanged. With RANK, WORLD_SIZE (> 1), LOCAL_RANK,
  MASTER_ADDR and MASTER_PORT set (LOCAL_WORLD_SIZE: ranks sharing this machine's cores), this process is one rank.
  Under srun (no torchrun variables), Slurm's stand for them: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the tasks
  per node, and MASTER_ADDR defaulting to the first host of SLURM_JOB_NODELIST (MASTER_PORT to 29500).
  Rank 0 runs the stages as one process would (explorer, buffer, checkpoints, metrics, weights to the explorer) and
  sends each train step's batch to the other ranks; every rank trains its share and all apply the same update.
  Ranks > 0 follow rank 0 through the stages and write nothing; stages without a trainer (explore, bench, serve)
  are rank 0's alone. Checkpoints are a one-process run's, so a run resumes with any number of ranks. A rank that
  dies or hangs stops the others within trainer.distributed_timeout seconds (default 600; it must exceed the
  longest gap between train steps) with an error naming the rank and the collective; rerun the same command to
  resume from the latest checkpoint. Example:
    torchrun --nproc-per-node 2 --no-python trinity run --config run.yaml
    trinity run --config run.yaml --nproc-per-node 2      # the same, without torchrun
    trinity run --config run.yaml --nnodes 2 --node-rank 0 --master-addr node0 --nproc-per-node 2   # on node0
    trinity run --config run.yaml --nnodes 2 --node-rank 1 --master-addr node0 --nproc-per-node 2   # on node1
`;

async function runCommand(command: 'run' | 'bench', args: string[]): Promise<number> {
  const { RUN_FLAGS } = await import('./run-flags.js');
  const { values } = parseArgs({ args, options: RUN_FLAGS });
  if (values.help) {
    process.stdout.write(RUN_HELP);
    return 0;
  }
  if (!values.config) throw new Error(`${command}: --config FILE is required (see --help)`);
  const launchFlags = {
    'nproc-per-node': values['nproc-per-node'],
    nnodes: values.nnodes,
    'node-rank': values['node-rank'],
    'master-addr': values['master-addr'],
    'master-port': values['master-port'],
  };
  const { launchPlanFromFlags } = await import('./launch.js');
  const launchGiven = Object.entries(launchFlags).filter(([, value]) => value !== undefined);
  if (command === 'bench' && launchGiven.length > 0)
    throw new Error(
      `bench: ${launchGiven.map(([name]) => `--${name}`).join(', ')} ${launchGiven.length === 1 ? 'is' : 'are'} for training (trinity run); bench has no trainer`,
    );
  const launchPlan = launchPlanFromFlags(launchFlags);
  const { ConfigError, loadConfig } = await import('../rft/run/config/index.js');
  const { resolveAlgorithm } = await import('../rft/algorithm/presets.js');
  const overrides = [...(values.set ?? []), ...(command === 'bench' ? ['mode=bench'] : [])];
  const { loadAlgorithmPlugins } = await import('../rft/algorithm/plugins.js');
  const { resolveStages } = await import('../rft/run/config/index.js');
  const baseDir = dirname(resolve(values.config));
  let config: Awaited<ReturnType<typeof loadConfig>>;
  try {
    // module-path algorithm modules must be registered before the algorithm sections are checked
    for (const stage of resolveStages(loadConfig(values.config, { overrides })))
      await loadAlgorithmPlugins(stage.algorithm, baseDir);
    config = loadConfig(values.config, { overrides, resolveAlgorithm });
  } catch (error) {
    if (error instanceof ConfigError) {
      process.stderr.write(`${error.message}\nnothing was run.\n`);
      return 1;
    }
    throw error;
  }
  if (launchPlan !== null) {
    const { launchRanks } = await import('./launch.js');
    const rankArgs = ['run', '--config', values.config, ...(values.set ?? []).flatMap((o) => ['--set', o])];
    // a rank still running this long after another failed has missed the failure: the longest collective timeout
    const timeouts = resolveStages(config).map((stage) => stage.trainer.distributed_timeout);
    return launchRanks({
      ...launchPlan,
      command: [process.execPath, ...process.execArgv, process.argv[1] as string, ...rankArgs],
      graceMs: Math.max(...timeouts) * 1000 + 5_000,
    });
  }
  const { runConfig } = await import('../rft/run/run.js');
  const controller = new AbortController();
  setMaxListeners(0, controller.signal); // every in-flight request listens to it
  // SIGINT (Ctrl-C) and SIGTERM stop the run cleanly (the step in flight is cut short: its workflows are aborted,
  // their worker threads terminated); the exit code is 128 + the signal's number; a second signal quits at once.
  const exitCodes = { SIGINT: 130, SIGTERM: 143 } as const;
  let stoppedBy: keyof typeof exitCodes | null = null;
  const stop = (signal: keyof typeof exitCodes) => {
    if (controller.signal.aborted) process.exit(exitCodes[signal]);
    stoppedBy = signal;
    const again = signal === 'SIGINT' ? 'Ctrl-C' : 'SIGTERM';
    process.stderr.write(`\nstopping after the current step (${again} again to quit at once)...\n`);
    controller.abort();
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
  // An error escaping an in-process workflow's promise chain fails its attempt; one nobody owns stops the run cleanly.
  const { installWorkflowFaultHandlers } = await import('../rft/workflow/isolation/faults.js');
  let fault: Error | null = null;
  installWorkflowFaultHandlers({
    onUnattributed: (error, kind) => {
      if (fault !== null) return;
      fault = error;
      process.stderr.write(`\ntrinity: an ${kind} outside any workflow attempt: ${error.stack ?? error.message}\n`);
      process.stderr.write('stopping after the current step...\n');
      controller.abort();
    },
  });
  const { runServeStage } = await import('../serve/index.js');
  const result = await runConfig(config, { signal: controller.signal, baseDir, serveStage: runServeStage });
  if (fault !== null) return 1;
  if (stoppedBy !== null) return exitCodes[stoppedBy];
  if (result.finalModelDir) console.log(`final model: ${result.finalModelDir}`);
  return 0;
}

const SERVE_HELP = `trinity serve --model DIR [options]
  Serves a Hugging Face model folder over the OpenAI API: POST /v1/chat/completions (streaming, tools, n, logprobs,
  stop, seed), POST /v1/completions, GET /v1/models, GET /health, GET /metrics (the engine's counters); the
  official openai client works unchanged.
  Add "return_token_ids": true to a request to get the exact prompt and completion token ids.
  To record agents' calls as experiences and train on them, use a config with mode: serve (trinity run).

  --model DIR              the model folder (config.json, safetensors, tokenizer.json)
  --host ADDR              listen address (default 127.0.0.1: this machine only). Any other address needs an API
                           key, or --allow-unauthenticated
  --port N                 default 8000
  --api-key KEY            require "Authorization: Bearer KEY" (default: $TRINITY_API_KEY, else none); not empty
  --allow-unauthenticated  serve a non-loopback --host without an API key: anyone who can reach it may use it
  --model-name NAME        the id /v1/models lists (default: the folder's name); requests may name any model
                           unless --allow-reload-from is given (its LoRA API serves several: names are exact)
  --dtype float32|bfloat16 compute dtype (default: the folder's)
  --slots N                sequences decoded at once (default 16)
  --max-length N           context per sequence (default: the model's, at most 2048)
  --enable-prefix-caching  a paged KV cache that keeps full blocks of finished requests and prefills a prompt only
                           past its longest cached prefix (a conversation's earlier turns); GET /metrics counts hits
  --enable-chunked-prefill a prompt longer than a step's token budget is prefilled in chunks, one per step, between
                           the decode steps of the running requests (GET /metrics: engine/prefill_chunks_total)
  --max-num-batched-tokens N  tokens of one engine step (default 8192): each decoding request takes one, a prefill
                           the rest; without --enable-chunked-prefill, the padded tokens of one prefill forward
  --max-tokens N           largest max_tokens a request may ask (default 4096)
  --max-prompt-tokens N    longest prompt (default: the context)
  --max-body-bytes N       largest request body (default 1048576)
  --max-n N                largest n (default 16)
  --allow-reload-from DIR  enable POST /update_weights_from_disk {model_path} for folders inside DIR
`;

async function serveCommand(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      model: { type: 'string' },
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '8000' },
      'api-key': { type: 'string' },
      'model-name': { type: 'string' },
      dtype: { type: 'string' },
      slots: { type: 'string' },
      'max-length': { type: 'string' },
      'enable-prefix-caching': { type: 'boolean' },
      'enable-chunked-prefill': { type: 'boolean' },
      'max-num-batched-tokens': { type: 'string' },
      'max-tokens': { type: 'string' },
      'max-prompt-tokens': { type: 'string' },
      'max-body-bytes': { type: 'string' },
      'max-n': { type: 'string' },
      'allow-reload-from': { type: 'string' },
      'allow-unauthenticated': { type: 'boolean' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) {
    process.stdout.write(SERVE_HELP);
    return 0;
  }
  if (!values.model) throw new Error('serve: --model DIR is required (see --help)');
  const int = (name: string, value: string | undefined, min = 1): number | undefined => {
    if (value === undefined) return undefined;
    const n = Number(value);
    if (!Number.isInteger(n) || n < min) throw new Error(`serve: --${name} must be an integer >= ${min}, got '${value}'`);
    return n;
  };
  if (values.dtype !== undefined && values.dtype !== 'float32' && values.dtype !== 'bfloat16')
    throw new Error(`serve: --dtype must be float32 or bfloat16, got '${values.dtype}'`);
  const { isLoopbackHost } = await import('../openai/index.js');
  if (values['api-key'] === '') throw new Error('serve: --api-key is empty, which would let every request in; give a key');
  if (values['api-key'] === undefined && process.env.TRINITY_API_KEY === '')
    throw new Error('serve: $TRINITY_API_KEY is set but empty, which would let every request in; give a key or unset it');
  const apiKey = values['api-key'] ?? process.env.TRINITY_API_KEY ?? null;
  if (apiKey === null && !isLoopbackHost(values.host) && !values['allow-unauthenticated'])
    throw new Error(
      `serve: --host ${values.host} is reachable from other machines, and no API key is set: give --api-key KEY ` +
        '(or $TRINITY_API_KEY), or --allow-unauthenticated to serve anyone who can reach it',
    );
  const { serveModel } = await import('../serve/index.js');
  const options = {
    modelDir: values.model,
    host: values.host,
    port: int('port', values.port, 0) as number,
    apiKey,
    ...(values['model-name'] ? { modelName: values['model-name'] } : {}),
    ...(values.dtype ? { dtype: values.dtype as 'float32' | 'bfloat16' } : {}),
    slots: int('slots', values.slots),
    maxLength: int('max-length', values['max-length']),
    enablePrefixCaching: values['enable-prefix-caching'],
    chunkedPrefill: values['enable-chunked-prefill'],
    maxNumBatchedTokens: int('max-num-batched-tokens', values['max-num-batched-tokens']),
    maxTokens: int('max-tokens', values['max-tokens']),
    maxPromptTokens: int('max-prompt-tokens', values['max-prompt-tokens']),
    maxBodyBytes: int('max-body-bytes', values['max-body-bytes']),
    maxN: int('max-n', values['max-n']),
    reloadRoot: values['allow-reload-from'] ?? null,
    log: (line: string) => console.error(line),
  };
  const served = await serveModel(
    Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)) as unknown as Parameters<typeof serveModel>[0],
  );
  console.log(
    `serving '${served.modelName}' at ${served.server.baseURL}${options.apiKey ? ' (API key required)' : ''}; Ctrl-C stops`,
  );
  if (apiKey === null && !isLoopbackHost(values.host))
    console.error(`warning: no API key: anyone who can reach ${served.server.url} can use this server`);
  await new Promise<void>((resolvePromise) => {
    process.once('SIGINT', () => resolvePromise());
    process.once('SIGTERM', () => resolvePromise());
  });
  await served.close();
  return 0;
}

const QUICKSTART_HELP = `trinity quickstart [--seed N] [--threads N] [--arch qwen2|qwen3_moe] [--set key=value]...
  The main job: creates a small Qwen2-architecture model (runs/quickstart/model; runs/ is the repository's, or the
  working directory's when trinity is an installed package), then runs
  examples/quickstart/config.yaml — held-out accuracy of the base model, SFT on expert demonstrations of two-digit
  addition, then GRPO with an exact verifier reward — and ends with a summary table and an HTML report
  (runs/quickstart/addition/report.html). --seed N (default 0) seeds the model's initialisation and the task order
  (runs/quickstart/addition-seedN). --threads N computes with N threads (OMP_NUM_THREADS; default: every core),
  another float rounding (runs/quickstart/addition[-seedN]-threadsN). --arch qwen3_moe makes the model a mixture of
  experts (8 experts of half the MLP's width, top 2; runs/quickstart/model-moe, job addition-moe); add
  --set algorithm.enable_router_replay=true to train through the experts the rollouts chose. Running it again resumes
  an unfinished run.
`;

async function quickstartCommand(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      seed: { type: 'string', default: '0' },
      threads: { type: 'string' },
      arch: { type: 'string', default: 'qwen2' },
      set: { type: 'string', multiple: true },
      help: { type: 'boolean' },
    },
  });
  if (values.help) {
    process.stdout.write(QUICKSTART_HELP);
    return 0;
  }
  const root = fileURLToPath(new URL('../../', import.meta.url));
  const seed = Number(values.seed);
  if (!Number.isInteger(seed) || seed < 0) throw new Error(`--seed must be a non-negative integer, got '${values.seed}'`);
  const threads = values.threads === undefined ? null : Number(values.threads);
  if (threads !== null && (!Number.isInteger(threads) || threads < 1 || threads > 4096))
    throw new Error(`--threads must be a whole number of threads from 1 to 4096, got '${values.threads}'`);
  // the run's thread budget (src/rft/run/config/stage-settings.ts coreBudget); another rounding, so a job of its own
  if (threads !== null) process.env.OMP_NUM_THREADS = String(threads);
  const { QUICKSTART_ARCHITECTURES, quickstartJobDir, quickstartPlan, quickstartRunsDir } = await import('./quickstart.js');
  const architecture = QUICKSTART_ARCHITECTURES.find((a) => a === values.arch);
  if (architecture === undefined)
    throw new Error(`--arch must be one of ${QUICKSTART_ARCHITECTURES.join(', ')}, got '${values.arch}'`);
  const runsDir = quickstartRunsDir(root, process.cwd());
  const plan = quickstartPlan(root, runsDir, seed, threads, values.set ?? [], architecture);
  const { modelDir } = plan;
  if (!existsSync(join(modelDir, 'config.json'))) {
    const { initModel } = await import('../model/init.js');
    const { parameters } = initModel(modelDir, plan.modelInit);
    console.log(`created ${modelDir}: ${architecture}, ${(parameters / 1e6).toFixed(2)}M parameters (trinity model init)`);
  }
  const code = await runCommand('run', ['--config', plan.configFile, ...plan.overrides.flatMap((o) => ['--set', o])]);
  if (code !== 0) return code;
  const jobDir = quickstartJobDir(plan);
  const { formatSummaryTable, summarizeRun, writeReport } = await import('../rft/report/index.js');
  console.log(`\n${formatSummaryTable(await summarizeRun(jobDir))}`);
  const report = await writeReport(jobDir);
  console.log(`report: ${report.file}`);
  return 0;
}

const MODEL_INIT_HELP = `trinity model init DIR [options]
  Writes a new randomly initialised model as a Hugging Face folder (config.json, model.safetensors,
  generation_config.json, tokenizer) that transformers and this framework load.

  --arch qwen2|qwen3|qwen2_moe|qwen3_moe|llama   architecture (default qwen2)
  --hidden-size N               hidden size (default 128)
  --layers N                    decoder layers (default 2)
  --heads N                     attention heads (default 4)
  --kv-heads N                  key/value heads for grouped-query attention (default heads/2)
  --intermediate-size N         MLP width (default 8/3 hidden, rounded up to 32)
  --max-positions N             max_position_embeddings (default 2048)
  --experts N                   qwen2_moe/qwen3_moe: experts per layer (default 8)
  --experts-per-tok N           qwen2_moe/qwen3_moe: experts each token is routed to (default 2)
  --moe-intermediate-size N     qwen2_moe/qwen3_moe: each expert's MLP width (default intermediate-size /
                                experts-per-tok; qwen2_moe's shared expert: intermediate-size)
  --untied                      separate lm_head instead of tied embeddings
  --tokenizer char|DIR          character tokenizer (default) or copy the tokenizer of a model folder
  --seed N                      initialisation seed (default 0)
  --dtype float32|bfloat16      weight dtype (default float32)
`;

const MODEL_CONVERT_HELP = `trinity model convert SRC DST [options]
  Loads the Hugging Face model folder SRC and writes it to DST (config.json, safetensors, tokenizer and generation
  files), optionally in another dtype, with another shard size, or with a PEFT LoRA adapter merged into the weights.

  --dtype float32|bfloat16      weight dtype of DST (default: SRC's)
  --adapter DIR                 merge this LoRA adapter (adapter_config.json + adapter_model.safetensors) into DST
  --max-shard-mb N              largest safetensors shard in MB (default 5000)
`;

async function modelConvertCommand(args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      dtype: { type: 'string' },
      adapter: { type: 'string' },
      'max-shard-mb': { type: 'string' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) {
    process.stdout.write(MODEL_CONVERT_HELP);
    return 0;
  }
  const [source, target] = positionals;
  if (source === undefined || target === undefined || positionals.length > 2)
    throw new Error('model convert: give SRC and DST folders (see --help)');
  if (resolve(source) === resolve(target)) throw new Error('model convert: DST must differ from SRC');
  if (values.dtype !== undefined && values.dtype !== 'float32' && values.dtype !== 'bfloat16') {
    throw new Error(`--dtype must be float32 or bfloat16, got '${values.dtype}'`);
  }
  const shardMb = values['max-shard-mb'] === undefined ? 5000 : Number(values['max-shard-mb']);
  if (!(shardMb > 0)) throw new Error(`--max-shard-mb must be a positive number, got '${values['max-shard-mb']}'`);
  const { CausalLM, LoraModel, loadModelConfig } = await import('../model/index.js');
  const sourceDtype = loadModelConfig(source).raw.torch_dtype ?? loadModelConfig(source).raw.dtype;
  const dtype = values.dtype ?? (sourceDtype === 'bfloat16' ? 'bfloat16' : 'float32');
  const model = CausalLM.load(source, { dtype });
  try {
    if (values.adapter) LoraModel.load(model, values.adapter).mergeAndUnload();
    const files = model.save(target, { maxShardBytes: shardMb * 1e6 });
    console.log(`wrote ${target} (${dtype}${values.adapter ? `, adapter ${values.adapter} merged` : ''}): ${files.length} files`);
  } finally {
    model.dispose();
  }
  return 0;
}

async function modelCommand(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === 'convert') return modelConvertCommand(rest);
  if (sub !== 'init') {
    process.stderr.write(`trinity model: unknown subcommand '${sub ?? ''}'\n\n${MODEL_INIT_HELP}\n${MODEL_CONVERT_HELP}`);
    return 2;
  }
  const { values, positionals } = parseArgs({
    args: rest,
    allowPositionals: true,
    options: {
      arch: { type: 'string', default: 'qwen2' },
      'hidden-size': { type: 'string' },
      layers: { type: 'string' },
      heads: { type: 'string' },
      'kv-heads': { type: 'string' },
      'intermediate-size': { type: 'string' },
      'max-positions': { type: 'string' },
      experts: { type: 'string' },
      'experts-per-tok': { type: 'string' },
      'moe-intermediate-size': { type: 'string' },
      untied: { type: 'boolean', default: false },
      tokenizer: { type: 'string', default: 'char' },
      seed: { type: 'string', default: '0' },
      dtype: { type: 'string', default: 'float32' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) {
    process.stdout.write(MODEL_INIT_HELP);
    return 0;
  }
  const [dir] = positionals;
  if (dir === undefined || positionals.length > 1) throw new Error('model init: give exactly one output folder (see --help)');
  const int = (flag: string, value: string | undefined): number | undefined => {
    if (value === undefined) return undefined;
    const n = Number(value);
    if (!Number.isInteger(n) || n < 1) throw new Error(`--${flag} must be a positive integer, got '${value}'`);
    return n;
  };
  if (values.dtype !== 'float32' && values.dtype !== 'bfloat16')
    throw new Error(`--dtype must be float32 or bfloat16, got '${values.dtype}'`);
  if (!['qwen2', 'qwen3', 'qwen2_moe', 'qwen3_moe', 'llama'].includes(values.arch)) {
    throw new Error(`--arch must be qwen2, qwen3, qwen2_moe, qwen3_moe or llama, got '${values.arch}'`);
  }
  if (values.arch !== 'qwen3_moe' && values.arch !== 'qwen2_moe') {
    for (const flag of ['experts', 'experts-per-tok', 'moe-intermediate-size'] as const)
      if (values[flag] !== undefined) throw new Error(`--${flag} needs --arch qwen2_moe or qwen3_moe, got --arch ${values.arch}`);
  }
  const { initModel } = await import('../model/init.js');
  const options: Record<string, unknown> = {
    architecture: values.arch,
    hiddenSize: int('hidden-size', values['hidden-size']),
    numLayers: int('layers', values.layers),
    numHeads: int('heads', values.heads),
    numKeyValueHeads: int('kv-heads', values['kv-heads']),
    intermediateSize: int('intermediate-size', values['intermediate-size']),
    maxPositionEmbeddings: int('max-positions', values['max-positions']),
    numExperts: int('experts', values.experts),
    numExpertsPerTok: int('experts-per-tok', values['experts-per-tok']),
    moeIntermediateSize: int('moe-intermediate-size', values['moe-intermediate-size']),
    tieWordEmbeddings: !values.untied,
    tokenizer: values.tokenizer,
    seed: Number(values.seed),
    dtype: values.dtype,
  };
  for (const key of Object.keys(options)) if (options[key] === undefined) delete options[key];
  const { parameters } = initModel(dir, options);
  console.log(`wrote ${dir}: ${values.arch}, ${(parameters / 1e6).toFixed(2)}M parameters`);
  return 0;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    console.error(`trinity: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 1;
  },
);
