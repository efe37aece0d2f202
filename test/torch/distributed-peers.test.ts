// Multi-machine rendezvous details that need no second machine: the interface Gloo listens on (the one whose subnet
// holds the master's address, not the host name's loopback) and a failed collective's message naming the rank, node
// and host behind a peer address (test/rft/run/multinode-netns.test.ts runs both across network namespaces).
import assert from 'node:assert/strict';
import type { NetworkInterfaceInfo } from 'node:os';
import { test } from 'node:test';
import { namePeers } from '../../src/torch/distributed-peers.js';
import { interfaceToward } from '../../src/torch/index.js';

const v4 = (address: string, netmask: string, internal = false): NetworkInterfaceInfo => ({
  address,
  netmask,
  family: 'IPv4',
  mac: '00:00:00:00:00:00',
  internal,
  cidr: null,
});

test("interfaceToward: the interface whose subnet holds the master's address; null for loopback or no subnet", async () => {
  const interfaces = {
    lo: [v4('127.0.0.1', '255.0.0.0', true)],
    eth0: [v4('192.168.1.7', '255.255.255.0')],
    ib0: [v4('10.20.0.3', '255.255.0.0')],
  };
  assert.equal(await interfaceToward('10.20.5.1', interfaces), 'ib0');
  assert.equal(await interfaceToward('192.168.1.1', interfaces), 'eth0');
  assert.equal(await interfaceToward('172.16.0.1', interfaces), null); // routed: Gloo's default (or GLOO_SOCKET_IFNAME)
  assert.equal(await interfaceToward('127.0.0.1', interfaces), null);
  assert.equal(await interfaceToward('localhost', interfaces), null); // a name, resolved (to loopback)
});

test('namePeers: the addresses in a failure message as ranks, nodes and hosts; nothing for unknown addresses', () => {
  const peers = [
    { rank: 0, host: 'node-a', node: 0, addresses: ['10.0.0.1'] },
    { rank: 1, host: 'node-b', node: 1, addresses: ['10.0.0.2'] },
    { rank: 2, host: 'node-b', node: 1, addresses: ['10.0.0.2'] },
    { rank: 3, host: 'node-c', node: null, addresses: ['10.0.0.3'] },
  ];
  assert.equal(
    namePeers('Connection closed by peer [10.0.0.2]:38047', peers, 0),
    ' (10.0.0.2 is rank 1: node 1, host node-b; rank 2: node 1, host node-b)',
  );
  assert.equal(namePeers('reset by [10.0.0.3]:1', peers, 0), ' (10.0.0.3 is rank 3: host node-c)');
  assert.equal(namePeers('reset by [10.0.0.9]:1', peers, 0), '');
  assert.equal(namePeers('timed out', peers, 0), '');
  // its own address is not a peer
  assert.equal(namePeers('local=[10.0.0.1]:5', peers, 0), '');
});
