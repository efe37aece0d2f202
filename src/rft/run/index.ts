export * from './run.js';
export * from '../config/settings.js';
export * from './stage.js';
