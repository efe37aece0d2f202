// Trinity Studio: a web app over a runs folder (docs/studio.md).
export type { Route, RouteRequest } from './router.js';
export { routes, type StudioOptions, type StudioServer, startStudio } from './server.js';
