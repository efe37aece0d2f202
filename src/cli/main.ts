// The `trinity` command line.
import { parseArgs } from 'node:util';

const HELP = `trinity — reinforcement fine-tuning of LLMs in TypeScript

Usage:
  trinity demo [--steps N] [--seed S]   train a tiny transformer with the tensor core; prints the loss falling
  trinity info                          libtorch version, threads, CUDA devices
  trinity --help                        this text
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

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    console.error(`trinity: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 1;
  },
);
