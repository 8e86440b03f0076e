// SPDX-License-Identifier: MIT
// compare.js - pm-bench compare's Node.js side: the same three workloads over worker_threads and cluster.
//
//   node compare.js threads|cluster stream|rtt|crash SIZE COUNT
//
// threads: two worker_threads; the main thread is the broker and relays
// every MessagePort message between them (the substrate of a WorkerCluster).
// cluster: two cluster workers; the primary relays their IPC messages
// (advanced serialization, so frames travel as bytes, not JSON).
//
// stream: worker A sends COUNT frames of SIZE bytes to worker B through the
//   broker; B acknowledges every quarter window (a window is what a 1 MiB
//   ring holds, so that no transport wins by buffering more).
// rtt: A requests from B through the broker COUNT times, one at a time.
// crash: COUNT times, kill B (terminate / SIGKILL) and time until its
//   replacement says ready.
//
// Prints one line, "result V1 V2 ...", in nanoseconds: stream: the elapsed
// time; rtt and crash: p50 p90 p99 p999. Exit status 0, or 1 with a line on
// stderr. Strings are control messages for the broker; anything else is
// relayed to the other worker.
'use strict';

const cluster = require('node:cluster');
const threads = require('node:worker_threads');

const RING = 1 << 20;

function now() {
    return process.hrtime.bigint();
}

function percentiles(v) {
    v.sort((a, b) => a - b);
    const at = (p) => v[Math.min(v.length - 1, Math.round(p * (v.length - 1)))];
    return [at(0.5), at(0.9), at(0.99), at(0.999)];
}

// ------------------------------------------------------------------ workers
// send(m) reaches the broker; onMessage(fn) receives what it relays.

function worker(role, workload, size, count, send, onMessage) {
    const buf = new Uint8Array(size);
    if (workload === 'stream' && role === 'A') {
        const window = Math.max(4, Math.floor(RING / size));
        let sent = 0;
        let acked = 0;
        const pump = () => {
            while (sent < count && sent - acked < window) {
                send(buf);
                sent++;
            }
        };
        onMessage((m) => {
            if (m === 'start') pump();
            else if (typeof m === 'number') {
                acked = m;
                pump();
            }
        });
    } else if (workload === 'stream') {
        const every = Math.max(1, Math.floor(Math.max(4, Math.floor(RING / size)) / 4));
        let got = 0;
        onMessage((m) => {
            if (typeof m === 'string') return;
            got++;
            if (got % every === 0 || got === count) send(got);
            if (got === count) send('done');
        });
    } else if (workload === 'rtt' && role === 'A') {
        const samples = [];
        let t0 = 0n;
        onMessage((m) => {
            if (m !== 'start') samples.push(Number(now() - t0));
            if (samples.length === count) {
                send('result ' + percentiles(samples).join(' '));
                return;
            }
            t0 = now();
            send(buf);
        });
    } else if (workload === 'rtt') {
        onMessage((m) => {
            if (typeof m !== 'string') send(m);
        });
    } else {
        onMessage(() => {});
    }
    send('ready');
}

// ------------------------------------------------------------------ the broker
// spawn(role) starts a worker and returns {send, onMessage, kill, onExit}.

function broker(spawn, workload, count) {
    const peers = {};
    const ready = new Set();
    let t0 = 0n;
    const crashes = [];

    const finish = (line) => {
        process.stdout.write(line + '\n');
        for (const r of Object.keys(peers)) peers[r].kill();
        process.exit(0);
    };
    const crashRound = () => {
        if (crashes.length === count) {
            finish('result ' + percentiles(crashes).join(' '));
            return;
        }
        t0 = now();
        ready.delete('B');
        peers.B.kill();
    };
    const start = (role) => {
        const p = spawn(role);
        peers[role] = p;
        p.onExit(() => {
            // The broker restarts a dead worker at once, like a supervisor
            // with no backoff.
            if (workload === 'crash' && role === 'B') start('B');
        });
        p.onMessage((m) => {
            const other = peers[role === 'A' ? 'B' : 'A'];
            if (typeof m !== 'string') {
                other.send(m);
                return;
            }
            if (m === 'ready') {
                ready.add(role);
                if (workload === 'crash' && ready.size === 2 && t0 !== 0n)
                    crashes.push(Number(now() - t0));
                if (ready.size === 2 && workload === 'crash') crashRound();
                else if (ready.size === 2 && t0 === 0n) {
                    t0 = now();
                    peers.A.send('start');
                }
            } else if (m === 'done') {
                finish('result ' + Number(now() - t0));
            } else if (m.startsWith('result ')) {
                finish(m);
            }
        });
    };
    start('A');
    start('B');
}

// ------------------------------------------------------------------ the two substrates

function main() {
    if (!threads.isMainThread) {
        const d = threads.workerData;
        worker(d.role, d.workload, d.size, d.count, (m) => threads.parentPort.postMessage(m),
               (fn) => threads.parentPort.on('message', fn));
        return;
    }
    if (cluster.isWorker) {
        const e = process.env;
        worker(e.PMB_ROLE, e.PMB_WORKLOAD, Number(e.PMB_SIZE), Number(e.PMB_COUNT),
               (m) => process.send(m), (fn) => process.on('message', fn));
        return;
    }
    const [mode, workload, sizeArg, countArg] = process.argv.slice(2);
    const size = Number(sizeArg);
    const count = Number(countArg);
    if (!['threads', 'cluster'].includes(mode) || !['stream', 'rtt', 'crash'].includes(workload) ||
        !(size >= 1 && size <= 65536) || !(count >= 1)) {
        process.stderr.write('usage: node compare.js threads|cluster stream|rtt|crash SIZE COUNT\n' +
                             `got: ${process.argv.slice(2).join(' ')}\n`);
        process.exit(1);
    }
    let spawn;
    if (mode === 'threads') {
        spawn = (role) => {
            const w = new threads.Worker(__filename, { workerData: { role, workload, size, count } });
            w.on('error', (err) => {
                process.stderr.write(`compare.js: worker ${role}: ${err}\n`);
                process.exit(1);
            });
            return {
                send: (m) => w.postMessage(m),
                onMessage: (fn) => w.on('message', fn),
                kill: () => w.terminate(),
                onExit: (fn) => w.on('exit', fn),
            };
        };
    } else {
        cluster.setupPrimary({ serialization: 'advanced' });
        spawn = (role) => {
            const w = cluster.fork({ PMB_ROLE: role, PMB_WORKLOAD: workload, PMB_SIZE: String(size),
                                     PMB_COUNT: String(count) });
            return {
                send: (m) => w.send(m),
                onMessage: (fn) => w.on('message', fn),
                kill: () => w.process.kill('SIGKILL'),
                onExit: (fn) => w.on('exit', fn),
            };
        };
    }
    broker(spawn, workload, count);
}

main();
