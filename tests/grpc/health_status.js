// Prints what grpc.health.v1 Health/Check answers for the whole server ("") at HOST:PORT:
// SERVING, NOT_SERVING, or the error's gRPC status name. Used by tests/redis_e2e.sh to follow
// readiness while Redis hangs.
//
// Usage: node health_status.js HOST:PORT (answers within 5 s)

'use strict';

const {grpc, loadProtos} = require('./testing');

const target = process.argv[2];
if (!target) {
  console.error('usage: node health_status.js HOST:PORT');
  process.exit(2);
}
const loaded = loadProtos(['grpc/health/v1/health.proto'],
                          {keepCase: true, enums: String, defaults: true});
const health = new loaded.grpc.health.v1.Health(target, grpc.credentials.createInsecure());
health.Check({service: ''}, {deadline: Date.now() + 5000}, (error, response) => {
  console.log(error ? grpc.status[error.code] : response.status);
  health.close();
});
