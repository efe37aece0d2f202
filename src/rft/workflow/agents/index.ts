// Agent workflows: agents that talk to the rollout model through the OpenAI client (function calling, tools).
import '../registry.js'; // the built-in workflows' list first: it, not this file, decides their registration order
export * from './agentscope-react.js';
export * from './agentscope-search.js';
export * from './calculator.js';
export * from './email-db.js';
export * from './email-db-write.js';
export * from './email-search.js';
export * from './gomoku.js';
export * from './lookup.js';
export * from './python-tool.js';
export * from './react-agent.js';
export * from './tool-agent.js';
export * from './web-search.js';
