// Agent workflows: agents that talk to the rollout model through the OpenAI client (function calling, tools).
export * from './calculator.js';
export * from './lookup.js';
export * from './tool-agent.js';
