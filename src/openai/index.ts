// trinity-rft openai: the OpenAI API over a rollout engine (the served side) and over a remote server (the client
// side, for external engines).
//   const service = new OpenAIService({ modelName: 'my-model', backend: engine });
//   const server = await startOpenAIServer({ service, apiKey: process.env.TRINITY_API_KEY });
//   const client = new OpenAI({ baseURL: server.baseURL, apiKey: 'key' });
export * from './limits.js';
export * from './protocol.js';
export * from './remote-engine.js';
export * from './remote-pool.js';
export * from './responses.js';
export * from './server.js';
export * from './service.js';
export * from './engine-process.js';
