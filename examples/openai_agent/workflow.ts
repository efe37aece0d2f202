// The workflow that trains agent.ts unchanged: it gives the agent an OpenAI client on the rollout model, scores the
// answer it returns, and hands back what the client recorded — one experience per conversation with the exact token
// ids the model saw and produced, and an action mask over the tokens it generated (the re-ask turn between two
// replies is masked out). Referenced from config.yaml by module path: default_workflow_type: ./workflow.ts#agentWorkflow
import type { WorkflowSpec } from 'trinity-rft/rft';
import { solve } from './agent.js';

export const agentWorkflow: WorkflowSpec = {
  repeatable: false, // one conversation per run: the runner starts repeat_times runs of each task
  description: 'examples/openai_agent: an openai-SDK agent that re-asks until the reply is a number',
  run: async ({ task, model, runIdBase, seed }) => {
    const temperature = task.rolloutArgs?.temperature;
    const answer = await solve(await model.openai(), 'any-model-name', task.prompt ?? '', {
      seed,
      ...(typeof temperature === 'number' ? { temperature } : {}),
    });
    const correct = answer === (task.response ?? '').trim() ? 1 : 0;
    const experiences = model.recordedExperiences({ reward: correct, runId: runIdBase });
    for (const experience of experiences) {
      const replies = (experience.messages ?? []).filter((m) => m.role === 'assistant').length;
      experience.metrics = { correct, replies };
    }
    return experiences;
  },
};
