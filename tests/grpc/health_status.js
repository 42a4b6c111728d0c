// Prints what grpc.health.v1 Health/Check answers for the whole server ("") at HOST:PORT:
// SERVING, NOT_SERVING, or the error's gRPC status name. Used by tests/redis_e2e.sh to follow
// readiness while Redis hangs.
//
// Usage: node health_status.js HOST:PORT (answers within 5 s)

'use strict';

const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const target = process.argv[2];
if (!target) {
  console.error('usage: node health_status.js HOST:PORT');
  process.exit(2);
}
const includeDirs = [path.resolve(__dirname, '../../src/rls/proto')];
if (fs.existsSync('/usr/include/google/protobuf/duration.proto')) includeDirs.push('/usr/include');
const definition = protoLoader.loadSync(['grpc/health/v1/health.proto'],
                                        {includeDirs, keepCase: true, enums: String, defaults: true});
const loaded = grpc.loadPackageDefinition(definition);
const health = new loaded.grpc.health.v1.Health(target, grpc.credentials.createInsecure());
health.Check({service: ''}, {deadline: Date.now() + 5000}, (error, response) => {
  console.log(error ? grpc.status[error.code] : response.status);
  health.close();
});
