// clients.js -- node-redis and ioredis against a running sluiced, for
// tests/e2e/test_clients.py, which installs this folder's locked packages
// (npm ci, cached under build/) and asserts what this prints.
//
//     node clients.js '{"port": P, "password": null, "at": T, "tag": "open",
//                       "step_ms": 20000}'
//
// Each client connects with its defaults (only host, port and, when given,
// the password: no protocol option, so both open with HELLO 3), then runs
// the same steps: HELLO, RL.ALLOW, RL.CHECK, a pipeline, a pipeline holding
// an error, a transaction (MULTI ... EXEC), one holding an error, one error
// on its own, CLIENT INFO, INFO, RL.RULES.  Keys are
// "<tag>-<client>:k", so the two clients count apart.  Prints one JSON
// object: {"node-redis": {...}, "ioredis": {...}}, each step's reply as the
// library returned it, errors as {"error": message, "name": class}.  A
// client that cannot connect or throws gets {"fatal": message}.  Every
// step has a deadline (STEP_MS): nothing here can hang the test.
'use strict';

const { createClient } = require('redis');
const Redis = require('ioredis');

const cfg = JSON.parse(process.argv[2]);
const STEP_MS = cfg.step_ms || 20000;
const HOST = '127.0.0.1';

function deadline(p, what) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(what + ': no answer in ' + STEP_MS + ' ms')), STEP_MS);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

function asError(e) {
  return { error: e && e.message, name: e && e.constructor && e.constructor.name };
}

// The steps, each a [name, () => Promise] over the client's functions:
// send(args) runs one command; pipeline(list of args) sends them together
// and returns their replies (rejecting on an error, if the library does);
// settled(list of args) sends them together and returns each reply or
// error; transaction(list of args) runs them in MULTI ... EXEC, as the
// library's multi().exec() does, and returns each reply or error.
function steps(who, send, pipeline, settled, transaction) {
  const at = String(cfg.at), key = cfg.tag + '-' + who + ':k', user = cfg.tag + '-' + who;
  let held = null, reserved = null; // the ids a later step gives back
  return [
    ['hello', () => send(['HELLO'])],
    ['allow', () => send(['RL.ALLOW', key, '5', '10s', 'AT', at])],
    ['check', () => send(['RL.CHECK', 'api', 'AT', at, 'DESCRIPTOR', 'user', user,
                          'DESCRIPTOR', 'team', 'red'])],
    ['pipeline', () => pipeline([
      ['RL.ALLOW', key, '5', '10s', 'AT', at],
      ['RL.PEEK', key, '5', '10s', 'AT', at],
      ['RL.CHECK', 'api', 'AT', at, 'DESCRIPTOR', 'user', user],
    ])],
    ['pipeline_error', () => settled([
      ['RL.ALLOW', key, '5', '10s', 'AT', at],
      ['RL.ALLOW', key, '0', '10s'],
      ['RL.PEEK', key, '5', '10s', 'AT', at],
    ])],
    ['multi', () => transaction([
      ['RL.ALLOW', key + 'tx', '2', '10s', 'AT', at],
      ['RL.ALLOW', key + 'tx', '2', '10s', 'AT', at],
      ['RL.ALLOW', key + 'tx', '2', '10s', 'AT', at],
      ['RL.CHECK', 'api', 'AT', at, 'DESCRIPTOR', 'user', user + 'tx'],
    ])],
    ['multi_error', () => transaction([
      ['RL.ALLOW', key + 'tx', '0', '10s'],
      ['RL.PEEK', key + 'tx', '2', '10s', 'AT', at],
    ])],
    ['error', () => send(['RL.ALLOW', key, '5', '10s', 'ALGO', 'tokenbucket'])],
    ['client_info', () => send(['CLIENT', 'INFO'])],
    ['info', () => send(['INFO', 'server'])],
    ['rules', () => send(['RL.RULES'])],
    // SPEC 10: a lease, refused while held, given back by its id; a
    // reservation settled at its actual cost; a wait answered at once
    ['acquire', async () => (held = await send(['RL.ACQUIRE', key + 'c', '1', 'TTL', '30000', 'AT', at]))],
    ['acquire_held', () => send(['RL.ACQUIRE', key + 'c', '1', 'TTL', '30000', 'AT', at])],
    ['release', () => send(['RL.RELEASE', key + 'c', String(held && held[6])])],
    ['release_again', () => send(['RL.RELEASE', key + 'c', String(held && held[6])])],
    ['reserve', async () => (reserved = await send(['RL.RESERVE', key + 'r', '100', '60s',
                                                    'COST', '30', 'AT', at]))],
    ['settle', () => send(['RL.SETTLE', key + 'r', String(reserved && reserved[6]), '45'])],
    ['wait', () => send(['RL.WAIT', key + 'w', '5', '10s', 'TIMEOUT', '1000'])],
  ];
}

async function run(who, connect, close, send, pipeline, settled, transaction) {
  const out = {};
  try {
    await deadline(connect(), 'connect');
  } catch (e) {
    return { fatal: 'connect: ' + (e && e.message) };
  }
  try {
    for (const [name, fn] of steps(who, send, pipeline, settled, transaction)) {
      try {
        out[name] = await deadline(fn(), name);
      } catch (e) {
        out[name] = asError(e);
      }
    }
  } finally {
    await deadline(close(), 'close').catch(() => {});
  }
  return out;
}

async function nodeRedis() {
  const errors = [];
  const client = createClient({
    socket: { host: HOST, port: cfg.port, reconnectStrategy: false, connectTimeout: STEP_MS },
    password: cfg.password || undefined,
  });
  client.on('error', (e) => errors.push(e && e.message));
  const out = await run(
    'node-redis',
    () => client.connect(),
    () => client.close(),
    (args) => client.sendCommand(args),
    (list) => { // an explicit pipeline: rejects with the first error
      const multi = client.multi();
      for (const args of list) multi.sendCommand(args);
      return multi.execAsPipeline();
    },
    async (list) => { // commands of one tick: node-redis writes them together
      const res = await Promise.allSettled(list.map((args) => client.sendCommand(args)));
      return res.map((r) => (r.status === 'fulfilled' ? r.value : asError(r.reason)));
    },
    async (list) => { // multi().exec(): MULTI ... EXEC; an error reply rejects it
      const multi = client.multi();
      for (const args of list) multi.sendCommand(args);
      try {
        return await multi.exec();
      } catch (e) { // MultiErrorReply: every reply, the errors among them
        if (!e || !Array.isArray(e.replies)) throw e;
        return e.replies.map((r) => (r instanceof Error ? asError(r) : r));
      }
    });
  if (errors.length) out.client_errors = errors;
  return out;
}

async function ioredis() {
  const errors = [];
  const client = new Redis({
    host: HOST, port: cfg.port, password: cfg.password || undefined,
    lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0,
    connectTimeout: STEP_MS,
  });
  client.on('error', (e) => errors.push(e && e.message));
  const pipeline = async (list) => {
    const p = client.pipeline();
    for (const args of list) p.call(...args);
    const res = await p.exec();
    return res.map(([err, v]) => (err ? asError(err) : v));
  };
  const transaction = async (list) => { // multi().exec(): MULTI ... EXEC
    const m = client.multi();
    for (const args of list) m.call(...args);
    const res = await m.exec();
    return res.map(([err, v]) => (err ? asError(err) : v));
  };
  const out = await run(
    'ioredis',
    () => client.connect(),
    () => client.quit(),
    (args) => client.call(...args),
    pipeline,
    pipeline,
    transaction);
  if (errors.length) out.client_errors = errors;
  return out;
}

(async () => {
  const result = { 'node-redis': await nodeRedis(), ioredis: await ioredis() };
  process.stdout.write(JSON.stringify(result) + '\n');
})().catch((e) => {
  process.stderr.write('clients.js: ' + (e && e.stack) + '\n');
  process.exit(2);
});
