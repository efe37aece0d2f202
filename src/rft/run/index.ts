export * from './run.js';
export * from '../settings.js';
export * from './stage.js';
