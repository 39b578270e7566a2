import { connect } from '@nats-io/transport-node';
import { Ownership } from '../src/engine/ownership.ts';
import { NatsLeaseStore, openOwnersBucket } from '../src/store/nats/owners.ts';
import { startNatsCluster } from './nats-cluster.ts';
const c = await startNatsCluster();
const owns: Ownership[] = [];
try {
  for (const id of ['a', 'b', 'c']) {
    const nc = await connect({ servers: c.urlList });
    const kv = await openOwnersBucket(nc, 'dbg');
    const o = new Ownership(new NatsLeaseStore(kv), { nodeId: id, partitions: 16, member: { http: '', grpc: '', version: '' }, listener: { onError: (e) => console.log(id, 'err', String(e)) } });
    await o.start();
    owns.push(o);
  }
  for (let i = 0; i < 8; i++) {
    await new Promise((r) => setTimeout(r, 500));
    console.log(owns.map((o) => `${o.nodeId}: owned ${o.owned()} live ${o.liveMembers().map((m) => m.id)} pref ${[...Array(16).keys()].map((n) => o.preferred(n) ?? '-').join('')}`).join('\n'));
  }
} finally {
  for (const o of owns) await o.stop({ release: false });
  await c.stop();
  process.exit(0);
}
