// trinity-rft serve: the user-facing serving entry points over src/openai — `trinity serve --model DIR` (a plain
// OpenAI-compatible server) and mode serve (recording agents' calls as experiences, rewards by feedback).
export * from './serve-model.js';
export * from './serve-stage.js';
