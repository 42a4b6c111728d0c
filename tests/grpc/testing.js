// Shared by the Node.js gRPC clients of the end-to-end tests: sluice's .proto
// files loaded with @grpc/proto-loader, and a tally of checks that prints one line each.

'use strict';

const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

// Our .proto files; the google/protobuf ones from the system (libprotobuf-dev) when present,
// else proto-loader's bundled copies.
function loadProtos(files, options) {
  const includeDirs = [path.resolve(__dirname, '../../src/rls/proto')];
  if (fs.existsSync('/usr/include/google/protobuf/duration.proto')) includeDirs.push('/usr/include');
  return grpc.loadPackageDefinition(protoLoader.loadSync(files, {includeDirs, ...options}));
}

// check(name, expected, actual) compares as JSON; summary() prints "N passed, M failed" and
// says whether all passed.
function checker() {
  const tally = {passed: 0, failed: 0};
  tally.check = (name, expected, actual) => {
    const e = JSON.stringify(expected);
    const a = JSON.stringify(actual);
    if (e === a) {
      tally.passed++;
      console.log(`ok   ${name}`);
    } else {
      tally.failed++;
      console.log(`FAIL ${name}: expected ${e}, got ${a}`);
    }
  };
  tally.summary = () => {
    console.log(`${tally.passed} passed, ${tally.failed} failed`);
    return tally.failed === 0;
  };
  return tally;
}

module.exports = {grpc, loadProtos, checker};
