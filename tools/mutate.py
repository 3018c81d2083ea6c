"""Mutation testing for maintainers: does the test suite notice small plausible bugs?

Each mutation is one textual edit of one source file (a plausible bug). For every mutation this
script copies the checkout (tracegen/, tests/, pyproject.toml, traces/examples/) into a temporary
directory, applies the edit there - the working tree is never touched - runs the chosen tests
against the copy (pytest -x -q -p no:cacheprovider, PYTHONPATH = the copy) and reports:

  caught   some test failed (the first failing test is named)
  MISSED   every test passed: the suite cannot tell this bug from the real code
  stale    the edit's text is no longer in the file (the code moved on: update the mutation)

Run from the repository root:

  python tools/mutate.py                                  # the default mutations and test subset
  python tools/mutate.py --list                           # names and edits only
  python tools/mutate.py -m psn-2^23 -m rx-port-ignored   # some mutations
  python tools/mutate.py --tests tests                    # the whole suite (the README's table)
  python tools/mutate.py --tests tests --jobs 2 --readme  # ... two at a time, table into README.md
  python tools/mutate.py --tests "tests/test_psn_wrap.py tests/test_workload.py"
  python tools/mutate.py --check                          # only: does every mutation's text apply?
  python tools/mutate.py --related-only --timeout 300 --readme   # PARTIAL: related test files only

--related-only runs, per mutation, only the test files that name the mutated module (plus the
module's ALSO_RELATED files): cheap, labelled partial everywhere it reports; "budget" then means
not caught within --timeout (not a proven hang). --deselect leaves out a test that fails on the
unmutated code (it would "catch" every mutation). --readme merges each result into README.md's
table as it comes (a run cut short keeps its rows), each row saying how and when it was run.

Each mutation runs the test files that name the mutated module first (so a caught bug is found in
seconds), then the rest of --tests; pytest stops at the first failure (-x). A test that runs away
fails on pytest-timeout's per-test limit (--test-timeout), which counts as caught only when the
run did not reach the whole-mutation --timeout; a mutation that hangs the whole run is "hang".

Exit status 1 when a mutation is not caught. The README's "Mutation testing" section keeps the
last verdict of every mutation. Add a mutation by appending (name, file, old text, new text) to MUTATIONS; the old
text must occur exactly once in the file.
"""
from __future__ import annotations

import argparse
import fcntl
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (name, file, old, new), grouped by module. The first twelve (marked *) are bugs that slipped through
# the suite once (issues 18 and 25's probes) or were weakly guarded; the rest are issue 25's pass over
# the fabric, collectives, workload, exports, tables, report and KPIs.
MUTATIONS = [
    # --- tracegen/fabric/topology.py
    ('nic-ip-host-off-by-one', 'tracegen/fabric/topology.py',
     '(nic_node % 200 + 1).astype(np.uint32))',
     '(nic_node % 200).astype(np.uint32))'),
    ('nic-ports-nic-major', 'tracegen/fabric/topology.py',
     'links["b"][:planes * n_nics] = n_nics + g.nic_leaf.T.ravel()',
     'links["b"][:planes * n_nics] = n_nics + g.nic_leaf.ravel()'),
    ('port-gbps-full-nic', 'tracegen/fabric/topology.py',
     'return self.nic_gbps // self.planes',
     'return self.nic_gbps'),
    ('qp-plane-by-receiver-qpn', 'tracegen/fabric/topology.py',
     'route = r.routes(src, dst, udp_sport, sqpn % self.planes,',
     'route = r.routes(src, dst, udp_sport, dqpn % self.planes,'),
    ('link-dir-name-swapped', 'tracegen/fabric/topology.py',
     'a, b = (int(ln["a"]), int(ln["b"])) if not d & 1 else',
     'a, b = (int(ln["a"]), int(ln["b"])) if d & 1 else'),
    # --- tracegen/fabric/kinds.py
    ('uplink-rate-ignores-uplink-count', 'tracegen/fabric/kinds.py',
     'need = Fraction(down_gbps) / (Fraction(repr(float(ratio))) * uplinks)',
     'need = Fraction(down_gbps) / Fraction(repr(float(ratio)))'),
    ('leaf-spine-downlink-one-nic', 'tracegen/fabric/kinds.py',
     'n_leaves, down = groups, min(fc.nodes_per_leaf, nodes) * nics * port',
     'n_leaves, down = groups, min(fc.nodes_per_leaf, nodes) * port'),
    ('fat-tree-pod-of-leaf-wrong', 'tracegen/fabric/kinds.py',
     'pod_first = np.arange(n_leaves) // half * half',
     'pod_first = np.arange(n_leaves) // half'),
    ('fat-tree-k-boundary', 'tracegen/fabric/kinds.py',
     'while k ** 3 // 4 < n_ports:',
     'while k ** 3 // 4 <= n_ports:'),
    ('plane-port-full-rate', 'tracegen/fabric/kinds.py',
     '    port = nic_gbps // fc.planes\n',
     '    port = nic_gbps\n'),
    ('fat-tree-rail-placement-factor', 'tracegen/fabric/kinds.py',
     'nic_order = (nic % nics) * nodes + nic // nics',
     'nic_order = (nic % nics) * nics + nic // nics'),
    # --- tracegen/fabric/topology_file.py
    ('file-link-rate-ignored', 'tracegen/fabric/topology_file.py',
     'gbps = ln[2] if len(ln) > 2 else port_gbps',
     'gbps = ln[2] if len(ln) > 3 else port_gbps'),
    ('file-nic-names-by-nodes', 'tracegen/fabric/topology_file.py',
     'names_of = {f"node{n // nics:04d}-rail{n % nics}": n for n in range(n_nics)}',
     'names_of = {f"node{n % nodes:04d}-rail{n // nodes}": n for n in range(n_nics)}'),
    ('file-nic-on-any-tier', 'tracegen/fabric/topology_file.py',
     'v not in idx or tiers[idx[v]] != 1:',
     'v not in idx or tiers[idx[v]] > 2:'),
    ('file-union-without-roots', 'tracegen/fabric/topology_file.py',
     'parent[root(a)] = root(b)',
     'parent[a] = b'),
    # --- tracegen/fabric/routing.py, ecmp_hash.py, route_graph.py
    ('ecmp-always-first-next-hop', 'tracegen/fabric/route_graph.py',  # *
     'pick = np.int64(h[i]) % n',
     'pick = np.int64(0) * n'),
    ('crc-protocol-tcp', 'tracegen/fabric/ecmp_hash.py',
     'np.full((n, 1), 17, np.uint8)',
     'np.full((n, 1), 6, np.uint8)'),
    ('qp-hash-destqp-byte-order', 'tracegen/fabric/ecmp_hash.py',
     'for s in (16, 8, 0)], axis=1).astype(np.uint8)],',
     'for s in (0, 8, 16)], axis=1).astype(np.uint8)],'),
    ('qp-hash-no-tier-offset', 'tracegen/fabric/routing.py',
     '        self.shift[self.leaves] = 0\n',
     ''),
    ('ipv6-prefix-misplaced', 'tracegen/fabric/ecmp_hash.py',
     '    out[:, 0] = 0xFD\n',
     '    out[:, 1] = 0xFD\n'),
    ('switch-seed-no-offset', 'tracegen/fabric/ecmp_hash.py',
     's * np.uint64(0x85EBCA77) + np.uint64(1))',
     's * np.uint64(0x85EBCA77))'),
    # --- tracegen/timing/connections.py
    ('rx-ports-not-shared', 'tracegen/timing/connections.py',  # *
     '        ok = links >= 0\n',
     '        ok = (links >= 0) & (links % 2 == 0)   # only a -> b directions: NIC receive ports dropped\n'),
    ('store-and-forward-dropped', 'tracegen/timing/connections.py',  # *
     'sf = np.where(gbps > 0, -(-bits // np.maximum(gbps, 1)), 0).sum(axis=1)',
     'sf = 0'),
    ('store-and-forward-at-ingress-rate', 'tracegen/timing/connections.py',
     'gbps = self.route_gbps[qp, 1:]',
     'gbps = self.route_gbps[qp, :-1]'),
    ('qp-weight-not-shared', 'tracegen/timing/connections.py',
     'return ptr, clink, counts / self.qps',
     'return ptr, clink, counts * 1.0'),
    ('qpn-order-channel-first', 'tracegen/timing/connections.py',
     'order = np.lexsort((ch, cm, dr, sr, dst, src))',
     'order = np.lexsort((cm, ch, dr, sr, dst, src))'),
    ('qp-plane-by-dst-qpn', 'tracegen/timing/connections.py',
     'plane = qpn_src % fabric.planes',
     'plane = qpn_dst % fabric.planes'),
    ('sport-fold-shift', 'tracegen/timing/connections.py',
     'fl ^= fl >> np.uint64(20)',
     'fl ^= fl >> np.uint64(16)'),
    # --- tracegen/collectives/ring.py
    ('ring-every-channel-same-rail', 'tracegen/collectives/ring.py',
     'return (k * local + (j + c) % local).reshape(channels, nodes * local)',
     'return (k * local + (j + 0 * c) % local).reshape(channels, nodes * local)'),
    ('ring-dep-on-own-previous-step', 'tracegen/collectives/ring.py',
     'dep[:, :, 1:] = np.roll(ids[:, :, :-1], 1, axis=3)     # step k-1, ring index i-1',
     'dep[:, :, 1:] = ids[:, :, :-1]'),
    ('ring-shard-floor', 'tracegen/collectives/ring.py',
     '    return -(-elems // n)\n',
     '    return elems // n\n'),
    ('ring-reduce-chain-ends-past-root', 'tracegen/collectives/ring.py',
     'first = root_idx + (1 if reduce else 0)',
     'first = root_idx + (2 if reduce else 0)'),
    # --- tracegen/collectives/tree.py
    ('tree-channels-alternate-trees', 'tracegen/collectives/tree.py',
     'else (2 * c) // channels',
     'else c % 2'),
    ('tree-heads-not-shared', 'tracegen/collectives/tree.py',
     'return (np.arange(channels) % half) % local',
     'return np.arange(channels) % local'),
    ('tree-depth-estimate-off-by-one', 'tracegen/collectives/tree.py',
     'return local - 1 + int(nodes).bit_length() - 1',
     'return local + int(nodes).bit_length() - 1'),
    # --- tracegen/collectives/halving_doubling.py
    ('hd-allreduce-far-partner-first', 'tracegen/collectives/halving_doubling.py',
     '_halving(st, real, bounds, _masks(p2, False), True)',
     '_halving(st, real, bounds, _masks(p2, True), True)'),
    ('hd-broadcast-root-skips-last', 'tracegen/collectives/halving_doubling.py',
     'for s in range((n - 1).bit_length()):\n            m = 1 << s\n            q = np.arange(min(m, n - m))',
     'for s in range((n - 1).bit_length()):\n            m = 1 << s\n            q = np.arange(min(m, n - m - 1))'),
    # --- tracegen/collectives/hierarchical.py
    ('hier-piece-floor', 'tracegen/collectives/hierarchical.py',
     'P = -(-usize // L)[:, None]',
     'P = (usize // L)[:, None]'),
    ('hier-alltoall-one-block-per-peer', 'tracegen/collectives/hierarchical.py',
     'stride=E, count=L, reduce=False',
     'stride=E, count=1, reduce=False'),
    # --- tracegen/collectives/alltoall.py
    ('a2a-block-floor', 'tracegen/collectives/alltoall.py',
     '        blk = -(-elems // n)\n        E = n * blk\n        off, size = channel_split(blk, channels)\n        delta',
     '        blk = elems // n\n        E = n * blk\n        off, size = channel_split(blk, channels)\n        delta'),
    ('a2a-round-order-reversed', 'tracegen/collectives/alltoall.py',
     'j = (i + delta) % n',
     'j = (i - delta) % n'),
    # --- tracegen/collectives/p2p.py
    ('p2p-split-floor', 'tracegen/collectives/p2p.py',
     '        per = -(-elems // channels)\n        lo = np.arange',
     '        per = elems // channels\n        lo = np.arange'),
    # --- tracegen/collectives/tuning.py
    ('tree-bandwidth-untuned', 'tracegen/collectives/tuning.py',  # *
     'bus *= 0.92 * 0.85',
     'bus *= 1.0'),
    ('tuning-ring-inter-steps', 'tracegen/collectives/tuning.py',
     'return 2 * (n - 1), (2 * nodes if nodes > 1 else 0)',
     'return 2 * (n - 1), (2 * (nodes - 1) if nodes > 1 else 0)'),
    ('tuning-trim-ceil', 'tracegen/collectives/tuning.py',
     'return int(max(1, min(channels, nbytes // per)))',
     'return int(max(1, min(channels, -(-nbytes // per))))'),
    ('tuning-p2p-ll-threshold-strict', 'tracegen/collectives/tuning.py',
     'per_peer <= P2P_LL_THRESHOLD_BYTES',
     'per_peer < P2P_LL_THRESHOLD_BYTES'),
    ('tuning-alltoall-per-peer-whole', 'tracegen/collectives/tuning.py',
     'per_peer = nbytes if kind == CollKind.SENDRECV else nbytes // max(n, 1)',
     'per_peer = nbytes'),
    ('tuning-bus-ignores-channels', 'tracegen/collectives/tuning.py',
     'min(nvl, min(local, channels) * nic_gbps / 8)',
     'min(nvl, local * nic_gbps / 8)'),
    ('tuning-chain-ring-chunk', 'tracegen/collectives/tuning.py',
     'chunk = msg = nccl.simple_step_bytes',
     'chunk = msg = nccl.ring_chunk_bytes'),
    # --- tracegen/collectives/protocol.py
    ('ll-lines-floor', 'tracegen/collectives/protocol.py',
     'll = -(-payload // LL_LINE_DATA_BYTES) * LL_LINE_BYTES',
     'll = payload // LL_LINE_DATA_BYTES * LL_LINE_BYTES'),
    ('ll128-data-per-line-128', 'tracegen/collectives/protocol.py',
     'LL128_LINE_BYTES, LL128_LINE_DATA_BYTES = 128, 120',
     'LL128_LINE_BYTES, LL128_LINE_DATA_BYTES = 128, 128'),
    ('ll-step-wire-is-data', 'tracegen/collectives/protocol.py',
     'Proto.LL: LL_STEP_WIRE_BYTES,',
     'Proto.LL: LL_STEP_DATA_BYTES,'),
    # --- tracegen/collectives/edges.py
    ('wire-overhead-no-ifg', 'tracegen/collectives/edges.py',
     'return 14 + (4 if vlan else 0) + (20 if ip_version == 4 else 40) + 8 + 12 + 4 + 4 + 8 + 12',
     'return 14 + (4 if vlan else 0) + (20 if ip_version == 4 else 40) + 8 + 12 + 4 + 4 + 8'),
    ('wire-no-immdt', 'tracegen/collectives/edges.py',
     'MSG_OVERHEAD_BYTES = 16 + 4',
     'MSG_OVERHEAD_BYTES = 16'),
    ('wire-last-packet-pad-dropped', 'tracegen/collectives/edges.py',
     'pad = (-(last_msg % pmtu)) % 4 + full_msgs',
     'pad = 0 * last_msg + full_msgs'),
    ('pxn-proxy-on-source-rail', 'tracegen/collectives/edges.py',
     'proxy = proxy_of[fabric.rank_node[src], rail[dst]]',
     'proxy = proxy_of[fabric.rank_node[src], rail[src]]'),
    # --- tracegen/collectives/ring_edges.py
    ('ring-edges-once-block-off-by-one', 'tracegen/collectives/ring_edges.py',
     'by_block[:, (i + 2) % n]).reshape(-1)',
     'by_block[:, (i + 3) % n]).reshape(-1)'),
    # --- tracegen/workload/iteration.py, blocks.py
    ('sp-backward-regather-dropped', 'tracegen/workload/blocks.py',
     '            if not fwd:   # the column-parallel input, re-gathered for the weight gradient',
     '            if False:   # the column-parallel input, re-gathered for the weight gradient'),
    ('cross-entropy-two-allreduces', 'tracegen/workload/blocks.py',
     '                for _ in range(3):',
     '                for _ in range(2):'),
    ('loss-mask-as-int64', 'tracegen/workload/blocks.py',
     '(n * FP32, FP32), \\',
     '(n * INT64, INT64), \\'),
    ('etp-gather-not-scaled', 'tracegen/workload/iteration.py',
     'self.etp_bytes = par.etp * self.a2a_bytes',
     'self.etp_bytes = self.a2a_bytes'),
    ('fold-with-expert-parallel', 'tracegen/workload/iteration.py',
     'return par.dp > 1 and par.ep == 1 and',
     'return par.dp > 1 and'),
    ('pp-not-split-under-sp', 'tracegen/workload/iteration.py',
     'split = par.sp or par.pp_scatter_gather',
     'split = par.pp_scatter_gather'),
    ('cp-ring-sends-backwards', 'tracegen/workload/blocks.py',
     'dst_c = (src_c + 1) % cp',
     'dst_c = (src_c - 1) % cp'),
    # --- tracegen/workload/volumes.py
    ('vol-cross-entropy-in-model-dtype', 'tracegen/workload/volumes.py',
     'out[Dim.TP] += 3 * _ar(t, tokens * 4) * mb',
     'out[Dim.TP] += 3 * _ar(t, tokens * B) * mb'),
    ('vol-sp-four-per-block', 'tracegen/workload/volumes.py',
     'blocks * (5 + 2 * rec) * _ag(t, S) * mb',
     'blocks * (4 + 2 * rec) * _ag(t, S) * mb'),
    ('vol-zero-gather-in-grad-dtype', 'tracegen/workload/volumes.py',
     'out[dim] += _ag(n, psi * gB) + _ag(n, psi * B)',
     'out[dim] += _ag(n, psi * gB) + _ag(n, psi * gB)'),
    ('vol-batch-broadcast-loss-mask-int64', 'tracegen/workload/volumes.py',
     '((8 + 4) * n if last else 0)',
     '((8 + 8) * n if last else 0)'),
    # --- tracegen/workload/memory.py
    ('zero2-grads-not-partitioned', 'tracegen/workload/memory.py',
     'return 2 * psi + (g + k) * psi / n_d',
     'return (2 + g) * psi + k * psi / n_d'),
    ('activation-34-as-24', 'tracegen/workload/memory.py',
     'return s * b * h * (34 + attn_scores) / t',
     'return s * b * h * (24 + attn_scores) / t'),
    ('in-flight-ignores-microbatches', 'tracegen/workload/memory.py',
     'in_flight = min(par.pp, par.microbatches)',
     'in_flight = par.pp'),
    ('full-recompute-ignores-sp', 'tracegen/workload/memory.py',
     'return 2 * s * b * h / (t if par.sp else 1)',
     'return 2 * s * b * h'),
    # --- tracegen/workload/compute.py
    ('attention-core-halved', 'tracegen/workload/compute.py',  # *
     'attn_core_ns=ns(4 * tokens',
     'attn_core_ns=ns(2 * tokens'),
    ('moe-capacity-floor', 'tracegen/workload/compute.py',  # *
     'math.ceil(',
     'math.floor('),
    ('logits-not-split-over-tp', 'tracegen/workload/compute.py',
     'm.padded_vocab(t) / t)',
     'm.padded_vocab(t))'),
    ('router-flops-dropped', 'tracegen/workload/compute.py',
     'moe = 2 * local * m.hidden * m.experts + 2 * rows',
     'moe = 0 * local + 2 * rows'),
    ('cp-queries-not-split', 'tracegen/workload/compute.py',
     "tokens = par.micro_batch * m.seq_len / c            # this CP rank's queries",
     "tokens = par.micro_batch * m.seq_len / 1            # this CP rank's queries"),
    # --- tracegen/workload/layout.py
    ('rank-order-tp-dp-cp-pp', 'tracegen/workload/layout.py',
     'return t + self.tp * (c + self.cp * (d + self.dp * p))',
     'return t + self.tp * (d + self.dp * (c + self.cp * p))'),
    ('expert-grid-dp-before-ep', 'tracegen/workload/layout.py',
     'return et + self.expert_tp * (e + self.ep * k) + self.stage_ranks * p',
     'return et + self.expert_tp * (k + self.edp * e) + self.stage_ranks * p'),
    ('dp-group-without-cp', 'tracegen/workload/layout.py',
     'for d in range(lay.dp) for c in range(lay.cp))',
     'for d in range(lay.dp) for c in range(1))'),
    # --- tracegen/workload/params.py
    ('norms-without-beta', 'tracegen/workload/params.py',
     'return (4 if m.bias else 2) * m.hidden',
     'return (2 if m.bias else 2) * m.hidden'),
    ('gqa-ignored', 'tracegen/workload/params.py',
     'return h * heads * dh + 2 * h * kv + heads * dh * h',
     'return h * heads * dh + 2 * h * heads * dh + heads * dh * h'),
    ('tied-head-free-with-pp', 'tracegen/workload/params.py',
     '    untied = not model.tied_embeddings or pp > 1\n    norm',
     '    untied = not model.tied_embeddings\n    norm'),
    ('fc2-bias-split-over-etp', 'tracegen/workload/params.py',
     'self.expert_replicated // ep)',
     'self.expert_replicated // (ep * etp))'),
    ('narayanan-bias-once', 'tracegen/workload/params.py',
     'return 12 * l * h * h + 13 * l * h +',
     'return 12 * l * h * h + 13 * h +'),
    # --- tracegen/timing/fluid_engine.py, fluid_solve.py (the engine: fluid.py)
    ('transfer-dep-dropped', 'tracegen/timing/fluid_engine.py',  # *
     '                    if e > ready[d]:\n                        ready[d] = e\n',
     ''),
    ('links-not-shared', 'tracegen/timing/fluid_solve.py',  # *
     '            wsum[ln] += lk_w[k]\n',
     '            wsum[ln] = lk_w[k]\n'),
    # --- tracegen/timing/schedule.py
    ('wire-time-halved', 'tracegen/timing/schedule.py',  # *
     'tr.deps, on_wire.astype(np.float64), lat,',
     'tr.deps, (on_wire // 2).astype(np.float64), lat,'),
    ('qp-send-queue-ignored', 'tracegen/timing/schedule.py',  # *
     'queue=send_queues(ops, rows, row_conn),',
     'queue=None,'),
    # --- tracegen/emit/packets/roce.py
    ('psn-2^23', 'tracegen/emit/packets/roce.py',  # *
     'PSN_MASK = 0xFFFFFF',
     'PSN_MASK = 0x7FFFFF'),
    # --- tracegen/emit/sims/chakra.py
    ('chakra-allgather-gathered-size', 'tracegen/emit/sims/chakra.py',
     '            size //= n_ranks\n',
     ''),
    ('chakra-pg-ids-from-0', 'tracegen/emit/sims/chakra.py',
     'groups[key] = len(groups) + 1',
     'groups[key] = len(groups)'),
    ('chakra-compute-floor-micros', 'tracegen/emit/sims/chakra.py',
     'c.duration_micros = (exact_ns + 500) // 1000 - written_us',
     'c.duration_micros = exact_ns // 1000 - written_us'),
    ('chakra-send-recv-peers-swapped', 'tracegen/emit/sims/chakra.py',
     'n.attr.append(A(name="comm_dst", int32_val=int(dst)))',
     'n.attr.append(A(name="comm_dst", int32_val=int(src)))'),
    # --- tracegen/emit/sims/simai.py
    ('simai-dp-group-consecutive', 'tracegen/emit/sims/simai.py',
     '"DP": tuple(base + k + j * tp for j in range(n // tp)),',
     '"DP": tuple(base + k * tp + j for j in range(n // tp)),'),
    ('simai-ga-is-pp', 'tracegen/emit/sims/simai.py',
     'ga: {p.microbatches}',
     'ga: {p.pp}'),
    ('simai-backward-rows-top-down', 'tracegen/emit/sims/simai.py',
     'b = back[n - 1 - i] if n - 1 - i < len(back) else Back()',
     'b = back[i] if i < len(back) else Back()'),
    ('simai-stage-rank-off', 'tracegen/emit/sims/simai.py',
     '        rank = s * per_stage\n',
     '        rank = s\n'),
    ('simai-busiest-is-lightest', 'tracegen/emit/sims/simai.py',
     'return max(files, key=lambda f: (f.compute_ns, -f.stage))',
     'return min(files, key=lambda f: (f.compute_ns, -f.stage))'),
    # --- tracegen/emit/sims/rank_steps.py
    ('receiver-runs-senders-compute', 'tracegen/emit/sims/rank_steps.py',
     'return 0 if p2p[o] and int(ops.groups[o][0]) != rank else',
     'return 0 if p2p[o] and int(ops.groups[o][0]) == rank else'),
    ('forked-gaps-counted-twice', 'tracegen/emit/sims/rank_steps.py',
     'steps.append(Step(x, key, max(0, gap(x) - run), i == 0))',
     'steps.append(Step(x, key, gap(x), i == 0))'),
    ('stream-point-ignores-deps', 'tracegen/emit/sims/rank_steps.py',
     'after_of[o] = frozenset(d for d in ops.deps[o].tolist() if member[d])',
     'after_of[o] = frozenset()'),
    # --- tracegen/emit/tables/flows.py
    ('route-column-wrong-qp-row', 'tracegen/emit/tables/flows.py',
     'r[net] = conns.route[c[net] * conns.qps]',
     'r[net] = conns.route[c[net]]'),
    ('ops-start-end-swapped', 'tracegen/emit/tables/flows.py',
     'col(None, "i8", "start_ns", start), col(None, "i8", "end_ns", end),',
     'col(None, "i8", "start_ns", end), col(None, "i8", "end_ns", start),'),
    ('flows-nic-columns-swapped', 'tracegen/emit/tables/flows.py',
     'row("src_nic", "i4"), row("dst_nic", "i4"),',
     'row("dst_nic", "i4"), row("src_nic", "i4"),'),
    # --- tracegen/emit/tables/csv_text.py
    ('csv-list-separator-comma', 'tracegen/emit/tables/csv_text.py',
     '                buf[j] = 59\n',
     '                buf[j] = 44\n'),
    ('csv-negative-sign-dropped', 'tracegen/emit/tables/csv_text.py',
     '        if neg:\n            buf[j] = 45\n',
     '        if neg:\n            buf[j] = 48\n'),
    ('csv-int-width-zero', 'tracegen/emit/tables/csv_text.py',
     '        while x >= 10:\n',
     '        while x > 10:\n'),
    # --- tracegen/emit/tables/perfetto.py
    ('perfetto-us-truncated', 'tracegen/emit/tables/perfetto.py',
     '    return round(ns / 1000, 3)\n\n\ndef _lanes',
     '    return ns // 1000\n\n\ndef _lanes'),
    ('perfetto-receiver-computes', 'tracegen/emit/tables/perfetto.py',
     '(~sender_only | first)',
     '(~sender_only | ~first)'),
    ('perfetto-merge-touching-gap', 'tracegen/emit/tables/perfetto.py',
     'new[1:] = s[1:] > e[:-1]',
     'new[1:] = s[1:] > e[1:]'),
    # --- tracegen/emit/tables/parquet.py
    ('parquet-ops-meta-says-flows', 'tracegen/emit/tables/parquet.py',
     '_meta("ops", job_name)',
     '_meta("flows", job_name)'),
    ('parquet-label-codes-shifted', 'tracegen/emit/tables/parquet.py',
     'pa.array(np.asarray(v).astype(np.int8))',
     'pa.array((np.asarray(v).astype(np.int8) + 1) % len(col.labels))'),
    ('parquet-list-element-dtype', 'tracegen/emit/tables/parquet.py',
     'return pa.list_(pa.from_numpy_dtype(np.dtype(col.dtype)))',
     'return pa.list_(pa.int32())'),
    # --- tracegen/emit/tables/summary.py
    ('summary-link-dirs-flipped', 'tracegen/emit/tables/summary.py',
     'np.tile([0, 1], len(fab.links))',
     'np.tile([1, 0], len(fab.links))'),
    ('summary-tx-rx-swapped', 'tracegen/emit/tables/summary.py',
     '"nic_tx_bytes": rep.nic_tx_bytes.tolist(), "nic_rx_bytes": rep.nic_rx_bytes.tolist(),',
     '"nic_tx_bytes": rep.nic_rx_bytes.tolist(), "nic_rx_bytes": rep.nic_tx_bytes.tolist(),'),
    ('summary-rank-nic-is-gpu', 'tracegen/emit/tables/summary.py',
     '"rank_nic": np.asarray(fab.rank_nic).tolist(),',
     '"rank_nic": np.asarray(fab.rank_gpu).tolist(),'),
    # --- tracegen/report/build.py
    ('report-rx-from-src-nic', 'tracegen/report/build.py',  # *
     'rx = np.bincount(r["dst_nic"][one]',
     'rx = np.bincount(r["src_nic"][one]'),
    ('link-load-not-split-over-qps', 'tracegen/report/build.py',
     'weights=conn_bytes[owner] * w, minlength=n_dirs)',
     'weights=conn_bytes[owner], minlength=n_dirs)'),
    ('replica-rank-offset-missing', 'tracegen/report/build.py',
     'out[at + d * flows.ops.replica_stride] += base[at]',
     'out[at + d] += base[at]'),
    ('link-util-bytes-as-bits', 'tracegen/report/render.py',
     'util = rep.link_bytes * 8 / (rep.link_gbps * rep.iteration_ns)',
     'util = rep.link_bytes / (rep.link_gbps * rep.iteration_ns)'),
    ('report-nvlink-bytes-one-replica', 'tracegen/report/build.py',
     'int((r["bytes"][sel & ~net] * copies[sel & ~net]).sum())',
     'int(r["bytes"][sel & ~net].sum())'),
    ('report-tier-dirs-flipped', 'tracegen/report/build.py',
     'tier = np.repeat(fabric.link_tier(), 2) * 2 + np.tile([0, 1], len(fabric.links))',
     'tier = np.repeat(fabric.link_tier(), 2) * 2 + np.tile([1, 0], len(fabric.links))'),
    # --- tracegen/report/kpi.py
    ('kpi-allreduce-bus-factor-rs', 'tracegen/report/kpi.py',
     'BUS_FACTOR_N1 = {"AllReduce": lambda n: 2 * (n - 1) / n,',
     'BUS_FACTOR_N1 = {"AllReduce": lambda n: (n - 1) / n,'),
    ('kpi-jain-without-n', 'tracegen/report/kpi.py',
     'return float(np.sum(x) ** 2 / (len(x) * s2))',
     'return float(np.sum(x) ** 2 / s2)'),
    ('kpi-busbw-bytes-not-bits', 'tracegen/report/kpi.py',
     'busbw = (op_bytes[o] * 8 / t *',
     'busbw = (op_bytes[o] / t *'),
    ('kpi-imbalance-no-minus-one', 'tracegen/report/kpi.py',
     'imb = max(up) / (sum(up) / len(up)) - 1',
     'imb = max(up) / (sum(up) / len(up))'),
    ('kpi-p99-is-p95', 'tracegen/report/kpi.py',
     'np.percentile(fct, 99)',
     'np.percentile(fct, 95)'),
    # --- tracegen/cli/collective.py
    ('nccl-tests-allgather-factor-1', 'tracegen/cli/collective.py',
     'if kind in (CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLTOALL):',
     'if kind in (CollKind.REDUCESCATTER, CollKind.ALLTOALL):'),
    ('nccl-tests-count-rs-whole', 'tracegen/cli/collective.py',
     'per_rank = kind in (CollKind.ALLGATHER, CollKind.REDUCESCATTER, CollKind.ALLTOALL)',
     'per_rank = kind in (CollKind.ALLGATHER, CollKind.ALLTOALL)'),
    ('nccl-tests-sweep-excludes-max', 'tracegen/cli/collective.py',
     '    while size <= max_bytes:\n        out.append(size)',
     '    while size < max_bytes:\n        out.append(size)'),
    ('nccl-tests-algbw-bits', 'tracegen/cli/collective.py',
     'return self.size_bytes / self.time_ns if self.time_ns else 0.0',
     'return self.size_bytes * 8 / self.time_ns if self.time_ns else 0.0'),
    # --- tracegen/timing/fluid_solve.py, fluid_engine.py (more): the engine's rules, judged by an independent max-min solver
    ('fluid-capacity-used-unweighted', 'tracegen/timing/fluid_solve.py',
     'rcap[ln] -= best * wsum[ln]',
     'rcap[ln] -= best'),
    ('fluid-rate-cap-ignored', 'tracegen/timing/fluid_solve.py',
     'if not frozen[i] and rate_cap[i] - level < best:',
     'if False and rate_cap[i] - level < best:'),
    ('fluid-gap-after-deps-dropped', 'tracegen/timing/fluid_engine.py',
     'rel_op[n_rel], rel_t[n_rel] = p, op_ready[p] + gap[p]',
     'rel_op[n_rel], rel_t[n_rel] = p, op_ready[p]'),
    ('fluid-arrival-latency-dropped', 'tracegen/timing/fluid_engine.py',
     '                e = t + extra[i]\n',
     '                e = t\n'),
    ('fluid-link-weights-not-reset', 'tracegen/timing/fluid_solve.py',
     '        wsum[ln] = 0.0\n        rcap[ln] = cap[ln]\n',
     '        rcap[ln] = cap[ln]\n'),
    ('fluid-queue-lifo', 'tracegen/timing/fluid_engine.py',
     '                    if q_tail[q] >= 0:\n                        q_next[q_tail[q]] = it\n'
     '                    else:\n                        q_head[q] = it\n                    q_tail[q] = it\n',
     '                    q_next[it] = q_head[q]\n                    q_head[q] = it\n'
     '                    if q_tail[q] < 0:\n                        q_tail[q] = it\n'),
    # --- tracegen/timing/schedule.py (more)
    ('nvlink-port-at-nic-rate', 'tracegen/timing/schedule.py',
     'np.full(2 * fabric.world, float(fabric.nvlink_gbps))]',
     'np.full(2 * fabric.world, float(fabric.nic_gbps))]'),
    ('nic-only-rx-is-tx-port', 'tracegen/timing/schedule.py',
     'nic_rx = 2 * fabric.rank_nic[dst_rank].astype(np.int64) + 1',
     'nic_rx = 2 * fabric.rank_nic[dst_rank].astype(np.int64)'),
    ('store-and-forward-whole-message', 'tracegen/timing/schedule.py',
     'last_pkt = np.minimum(on_wire, pmtu + packet_overhead_bytes(vlan, ip_version))',
     'last_pkt = on_wire'),
    # --- tracegen/timing/schedule_conn.py
    ('conn-rate-cap-keeps-fill', 'tracegen/timing/schedule_conn.py',
     'busy = np.maximum(op_alone[it_op] - op_fill[it_op], 1)',
     'busy = np.maximum(op_alone[it_op], 1)'),
    ('conn-alone-without-latency', 'tracegen/timing/schedule_conn.py',
     't_chunk, _ = _alone(tr.deps, wire, lat, links,',
     't_chunk, _ = _alone(tr.deps, wire, 0 * lat, links,'),
    ('conn-unfold-repeats-replica-0', 'tracegen/timing/conn_edges.py',
     'np.repeat(np.arange(1, ops.replicas, dtype=np.int64), len(idx))',
     'np.repeat(np.arange(ops.replicas - 1, dtype=np.int64), len(idx))'),
    ('conn-channel-edges-unscaled', 'tracegen/timing/conn_items.py',
     'scale = np.where(big[item] > 0, nbytes / np.maximum(big[item], 1e-300), 1.0)',
     'scale = np.ones(len(nbytes))'),
    # --- tracegen/collectives/ring_edges.py: ring ReduceScatter / AllGather in closed form (issue 27)
    ('shard-edges-n-sends', 'tracegen/collectives/ring_edges.py',
     'cols = {k: np.repeat((n - 1) * f.sum(axis=0), n)',
     'cols = {k: np.repeat(n * f.sum(axis=0), n)'),
    ('shard-alone-channels-own-port', 'tracegen/collectives/ring_edges.py',
     'step_ns = int(np.ceil(float(net.sum()) * 8 / nic_gbps))',
     'step_ns = int(np.ceil(float(net.max()) * 8 / nic_gbps))'),
    ('shard-alone-chain-all-edges', 'tracegen/collectives/ring_edges.py',
     'chain = lat.sum(axis=1) - lat.min(axis=1)',
     'chain = lat.sum(axis=1)'),
    # --- tracegen/timing/alltoall_agg.py (AllToAlls per sending rank) and its users
    ('agg-item-bytes-summed', 'tracegen/timing/alltoall_agg.py',
     'np.maximum.at(big, p["agg"], nb)',
     'np.add.at(big, p["agg"], nb)'),
    ('agg-nvlink-rx-ports-unloaded', 'tracegen/timing/alltoall_agg.py',
     'wb = np.r_[c_w[take] * nb[own_net], nb[vi], nb[vi]]',
     'wb = np.r_[c_w[take] * nb[own_net], nb[vi], 0 * nb[vi]]'),
    ('agg-item-bytes-are-the-rows', 'tracegen/timing/schedule_conn.py',
     '        ebytes[is_agg] = a_big[prow[is_agg]]',
     '        pass'),
    ('agg-rx-not-kept', 'tracegen/report/build.py',
     '        rx += flows.agg_rx_nic_bytes',
     '        pass'),
    ('agg-link-bytes-not-kept', 'tracegen/report/build.py',
     '        loads = loads + flows.agg_link_wire',
     '        pass'),
    ('work-a2a-per-sender-as-pairs', 'tracegen/timing/work.py',
     'per_op = 2 * n              # per sender',
     'per_op = t              # per sender'),
    # --- tracegen/timing/work.py (the work estimate)
    ('work-ring-allreduce-one-pass', 'tracegen/timing/work_templates.py',
     'rows = pieces(elems, ch * n, chunk) * 2 * (n - 1)',
     'rows = pieces(elems, ch * n, chunk) * (n - 1)'),
    ('work-messages-not-counted', 'tracegen/timing/work.py',
     'return (self.transfers + OP_UNITS * self.ops + self.messages * BYTES_PER_MESSAGE // BYTES_PER_UNIT',
     'return (self.transfers + OP_UNITS * self.ops'),
    ('work-a2a-one-block-per-pair', 'tracegen/timing/work_templates.py',
     'rows = n * (n - 1) * min(ch, -(-elems // n))',
     'rows = n * (n - 1)'),
    # --- tracegen/emit/packets/plan.py
    ('packet-wire-time-no-overhead', 'tracegen/emit/packets/plan.py',
     'return ((np.asarray(frame_bytes, dtype=np.int64) + roce.WIRE_OVERHEAD_BYTES) * 8 + gbps - 1) // gbps',
     'return (np.asarray(frame_bytes, dtype=np.int64) * 8 + gbps - 1) // gbps'),
    ('packet-last-payload-full-mtu', 'tracegen/emit/packets/plan.py',
     'payload = np.where(last, m_size - (m_npk - 1) * pmtu, pmtu)',
     'payload = np.where(last, m_size - m_npk * pmtu + pmtu - 1, pmtu)'),
    ('packet-ack-every-off-by-one', 'tracegen/emit/packets/plan_build.py',
     'n_ack = 1 + ((m_npk - 1) // out.ack_every if out.ack_every > 0 else 0 * m_npk)',
     'n_ack = 1 + (m_npk // out.ack_every if out.ack_every > 0 else 0 * m_npk)'),
    ('packet-qp-split-no-128-align', 'tracegen/emit/packets/plan_build.py',
     'chunk = -(-(-(-m_size // qps)) // 128) * 128',
     'chunk = -(-m_size // qps)'),
    # --- tracegen/emit/packets/{schedule,cnps}.py (pacing, IP ids)
    ('pace-factor-dropped', 'tracegen/emit/packets/cnps.py',
     'p.m_cap = np.maximum(f, 1) if (f > 1).any() else None',
     'p.m_cap = None'),
    ('ack-rounds-leave-late-messages', 'tracegen/emit/packets/schedule.py',
     '            if late_data.any():\n                m_nominal = running_max(',
     '            if False:\n                m_nominal = running_max('),
    ('ack-rounds-none', 'tracegen/emit/packets/plan.py',
     'ACK_ROUNDS = 16 ',
     'ACK_ROUNDS = 0 '),
    ('ip-id-not-per-nic', 'tracegen/emit/packets/schedule.py',
     'ids[order] = (c - c[np.maximum.accumulate(np.where(first, np.arange(len(c)), 0))]) & 0xFFFF',
     'ids[order] = c & 0xFFFF'),
    ('ip-id-wraps-at-15-bits', 'tracegen/emit/packets/schedule.py',
     'segs.ip_id = (tx.ip_id[seg] + segs.ka - tx.ka[seg]) & 0xFFFF',
     'segs.ip_id = (tx.ip_id[seg] + segs.ka - tx.ka[seg]) & 0x7FFF'),
    ('pacing-cnp-routed-by-qp-sport', 'tracegen/emit/packets/cnps.py',
     'k_route=routes.link_dirs(fabric, p.m_dst[m], p.m_src[m], 0, p.c_plane[p.m_conn[m]],',
     'k_route=routes.link_dirs(fabric, p.m_dst[m], p.m_src[m], p.c_sport[p.m_conn[m]], p.c_plane[p.m_conn[m]],'),
    # --- tracegen/emit/packets/roce.py (more)
    ('ipv4-checksum-one-fold', 'tracegen/emit/packets/roce.py',
     '    w = (w & 0xFFFF) + (w >> 16)\n    w = (w & 0xFFFF) + (w >> 16)\n',
     '    w = (w & 0xFFFF) + (w >> 16)\n'),
    ('ipv4-checksum-skips-dst', 'tracegen/emit/packets/roce.py',
     'for addr in (ip["src"].astype(np.uint32), ip["dst"].astype(np.uint32)):',
     'for addr in (ip["src"].astype(np.uint32),):'),
    # --- tracegen/emit/views/files.py
    ('view-plane-by-dst-qpn', 'tracegen/emit/views/files.py',
     'keep = p.c_qpn_src[item_conn(p, part.src, part.idx)] % planes == plane',
     'keep = p.c_qpn_dst[item_conn(p, part.src, part.idx)] % planes == plane'),
    ('view-merge-drops-first-nic', 'tracegen/emit/views/files.py',
     'nics = nics[np.isin(nics, p.nics)].tolist()',
     'nics = nics[np.isin(nics, p.nics)].tolist()[1:]'),
    # --- tracegen/emit/views/lab.py
    ('lab-rate-scales-from-rate', 'tracegen/emit/views/lab.py',
     'scale = lambda g: g and max(1, g * rate // c.nic_gbps)',
     'scale = lambda g: g and max(1, rate)'),
    ('lab-hosts-one-subnet-each-l2', 'tracegen/emit/views/lab.py',
     'hosts = ip0 + np.arange(n, dtype=np.int64) * (1 if l2 else size)',
     'hosts = ip0 + np.arange(n, dtype=np.int64) * (size if l2 else 1)'),
    ('lab-lead-us-as-ns', 'tracegen/emit/views/lab.py',
     'lead_ns=int(round(lead * 1000))',
     'lead_ns=int(round(lead))'),
    ('lab-mac-multicast-accepted', 'tracegen/emit/views/lab.py',
     '    if b[0] & 1:\n',
     '    if b[0] & 0x80:\n'),
    # --- tracegen/emit/views/pcap.py
    ('causality-late-frames-unsaid', 'tracegen/emit/views/pcap.py',
     '    if causal["late_frames"]:',
     '    if causal["late_frames"] < 0:'),
    ('causality-down-link-frames-unsaid', 'tracegen/emit/views/pcap.py',
     '    if causal.get("frames_on_down_links"):',
     '    if False:'),
    ('epoch-paths-down-counts-segments', 'tracegen/emit/packets/epoch_paths.py',
     'left += int((s.kb - s.ka)[hit].sum() + k_hit.sum())',
     'left += int(hit.sum() + k_hit.sum())'),
    ('causality-hides-late-acks', 'tracegen/emit/views/pcap.py',
     'd = {"late_frames": int(p.late), "late_acks": int(p.late_acks),',
     'd = {"late_frames": int(p.late), "late_acks": 0,'),
    ('pcap-estimate-sender-only', 'tracegen/emit/views/pcap.py',
     '(p.m_src, p.m_keep, p.m_npk, m_bytes), (p.m_dst, p.m_keep, p.m_npk, m_bytes),',
     '(p.m_src, p.m_keep, p.m_npk, m_bytes),'),
    ('pcap-estimate-counts-empty-files', 'tracegen/emit/views/pcap.py',
     'return sum(c[0] for c in counts), sum(c[1] for c in counts if c[0] > 0)',
     'return sum(c[0] for c in counts), sum(c[1] for c in counts)'),
    # --- tracegen/emit/sims/ns3.py
    ('ns3-link-rate-mbps', 'tracegen/emit/sims/ns3.py',
     'body = "".join(f"{a} {b} {g}Gbps {lat}ns 0.000000\\n"',
     'body = "".join(f"{a} {b} {g}Mbps {lat}ns 0.000000\\n"'),
    ('ns3-flow-count-off-by-one', 'tracegen/emit/sims/ns3.py',
     '    yield f"{len(lines)}\\n"\n',
     '    yield f"{len(lines) - 1}\\n"\n'),
    ('ns3-flow-src-dst-swapped', 'tracegen/emit/sims/ns3.py',
     'seconds(T0_NS + t)}\\n" for s, d, b, t in rows)',
     'seconds(T0_NS + t)}\\n" for d, s, b, t in rows)'),
    ('ns3-header-nics-as-nodes', 'tracegen/emit/sims/ns3.py',
     'header = simai_header or f"{n_nodes} {fabric.n_switches} {len(fabric.links)}"',
     'header = simai_header or f"{fabric.n_nics} {fabric.n_switches} {len(fabric.links)}"'),
    # --- tracegen/output/place.py
    ('outdir-parent-of-cwd-allowed', 'tracegen/output/place.py',
     'return child == parent or parent in child.parents',
     'return child == parent'),
    ('outdir-force-check-inverted', 'tracegen/output/place.py',
     '"(tracegen deletes only files it wrote)")\n        blocked = [n for n in names if os.path.lexists(p / n) and not owned(p, n)]',
     '"(tracegen deletes only files it wrote)")\n        blocked = [n for n in names if os.path.lexists(p / n) and owned(p, n)]'),
    ('outdir-job-dir-may-climb', 'tracegen/output/place.py',
     'if p.is_absolute() or ".." in p.parts or not p.parts or str(p) == ".":',
     'if p.is_absolute() or not p.parts or str(p) == ".":'),
    # --- tracegen/output/ownership.py
    ('ownership-size-not-checked', 'tracegen/output/ownership.py',
     'if is_reg(st.st_mode) and listed.get(rel) == st.st_size:',
     'if is_reg(st.st_mode) and rel in listed:'),
    ('ownership-dotdot-in-manifest', 'tracegen/output/ownership.py',
     'return bool(rel) and not p.is_absolute() and ".." not in p.parts and',
     'return bool(rel) and not p.is_absolute() and'),
    ('ownership-own-pid-alive', 'tracegen/output/ownership.py',
     '        if pid == os.getpid():\n            return False\n',
     ''),
    # --- tracegen/output/guard.py
    ('guard-lock-shared', 'tracegen/output/guard.py',
     'fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)',
     'fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)'),
    ('guard-outermost-section-not-deferred', 'tracegen/output/guard.py',
     '        if _SIG["critical"]:\n            _SIG["pending"]',
     '        if _SIG["critical"] > 1:\n            _SIG["pending"]'),
    ('guard-lock-file-left', 'tracegen/output/guard.py',
     '                    os.unlink(self.path)\n',
     '                    pass\n'),
    # --- tracegen/config/rules.py and values.py (validation)
    ('config-cp-seq-one-chunk', 'tracegen/config/rules.py',
     'if p.cp > 1 and m.seq_len % (2 * p.cp):',
     'if p.cp > 1 and m.seq_len % p.cp:'),
    ('config-kv-heads-divisibility-dropped', 'tracegen/config/rules.py',
     'if m.kv_heads and (m.kv_heads > m.heads or m.heads % m.kv_heads):',
     'if m.kv_heads and m.kv_heads > m.heads:'),
    ('config-global-batch-ignores-dp', 'tracegen/config/rules.py',
     '    per_step = p.micro_batch * p.dp\n',
     '    per_step = p.micro_batch\n'),
    ('config-range-low-bound-exclusive', 'tracegen/config/values.py',
     '        if not lo <= value <= hi:\n',
     '        if not lo <= value < hi:\n'),
    ('config-moe-tp-without-sp', 'tracegen/config/rules.py',
     'if m.experts and p.tp > 1 and not p.sp:',
     'if m.experts and p.tp > 1 and not p.sp and False:'),
    # --- tracegen/emit/packets/capture_file.py
    ('pcapng-record-unpadded', 'tracegen/emit/packets/capture_file.py',
     'return EPB_HDR.itemsize + pad4(incl) + options + 4',
     'return EPB_HDR.itemsize + incl + options + 4'),
    ('pcapng-block-length-no-trailer', 'tracegen/emit/packets/capture_file.py',
     '    total = 12 + len(body)\n',
     '    total = 8 + len(body)\n'),
    # --- tracegen/emit/packets/congestion.py
    ('ecn-periodic-mark-one-late', 'tracegen/emit/packets/congestion.py',
     'g = np.ceil(k / fraction).astype(np.int64) - 1',
     'g = np.ceil(k / fraction).astype(np.int64)'),
    ('ecn-random-threshold-halved', 'tracegen/emit/packets/congestion.py',
     'threshold = np.uint64(min(int(fraction * 2.0**64), 2**64 - 1))',
     'threshold = np.uint64(min(int(fraction * 2.0**63), 2**64 - 1))'),
    # --- tracegen/emit/packets/nccl_net.py
    ('nccl-net-p2p-slot-is-simple-step', 'tracegen/emit/packets/nccl_net.py',
     'simple = np.where(algo == Algo.P2P, nccl.p2p_chunk_bytes, nccl.simple_step_bytes)',
     'simple = np.where(algo == Algo.P2P, nccl.simple_step_bytes, nccl.simple_step_bytes)'),
    ('nccl-net-ll-step-8-byte-lines', 'tracegen/emit/packets/nccl_net.py',
     'LL_STEP_BYTES = 8 * 512 * 16 ',
     'LL_STEP_BYTES = 8 * 512 * 8 '),
    # --- tracegen/emit/packets/frames.py
    ('frames-ip-checksum-one-fold', 'tracegen/emit/packets/frames.py',
     '        s = (s & 0xFFFF) + (s >> 16)\n        csum = ~((s & 0xFFFF) + (s >> 16)) & 0xFFFF\n',
     '        csum = ~((s & 0xFFFF) + (s >> 16)) & 0xFFFF\n'),
    ('frames-psn-no-segment-offset', 'tracegen/emit/packets/frames.py',
     'psn = (tm.psn[tid] + j - tm.j[tid]) & roce.PSN_MASK',
     'psn = (tm.psn[tid] + j) & roce.PSN_MASK'),
    # --- tracegen/emit/packets/addresses.py
    # (was addresses-last-link-off-by-one: link == hops sends the last link through the routed
    # branch, which gives the same two ends - an equivalent mutant, no test can catch it)
    ('addresses-last-link-from-sender-leaf', 'tracegen/emit/packets/addresses.py',
     'src = np.where(first, tx_nic, routes.port_leaf_node(fabric, rx_nic, plane))',
     'src = np.where(first, tx_nic, routes.port_leaf_node(fabric, tx_nic, plane))'),
    # --- issue 25, second pass: two per emit / timing / config module that had fewer
    # --- tracegen/emit/bundle.py
    ('bundle-wire-note-always', 'tracegen/emit/bundle.py',
     '    if not skipped or on_the_wire(run):\n',
     '    if not skipped:\n'),
    ('bundle-perfetto-mask-ignores-ranks', 'tracegen/emit/bundle.py',
     'nic_mask=sel.nic_mask if (out.nics or out.ranks) else None',
     'nic_mask=sel.nic_mask if out.nics else None'),
    # --- tracegen/emit/packets/addresses.py
    ('addresses-last-link-src-tx-leaf', 'tracegen/emit/packets/addresses.py',
     'src = np.where(first, tx_nic, routes.port_leaf_node(fabric, rx_nic, plane))',
     'src = np.where(first, tx_nic, routes.port_leaf_node(fabric, tx_nic, plane))'),
    # --- tracegen/emit/packets/copies.py
    ('copies-received-one-link-early', 'tracegen/emit/packets/copies.py',
     'np.zeros(len(idx), np.int64) if src in SENT else hops - 1, 0, iface)',
     'np.zeros(len(idx), np.int64) if src in SENT else hops - 2, 0, iface)'),
    ('copies-cts-on-message-qp', 'tracegen/emit/packets/copies.py',
     'np.where((kind == CTS) | (kind == ACK_CTS), p.m_conn[m] - p.m_q[m], p.m_conn[m])',
     'p.m_conn[m]'),
    # --- tracegen/emit/packets/hops.py
    ('hops-control-one-link-latency', 'tracegen/emit/packets/hops.py',
     'k_arrive = k_tx + _lat(p, p.k_route[:, 0]) + _lat(p, p.k_route[:, 1])',
     'k_arrive = k_tx + _lat(p, p.k_route[:, 0])'),
    ('hops-rate-of-fastest-link', 'tracegen/emit/packets/hops.py',
     'gbps[cm] = np.minimum(gbps[cm], p.link_gbps_at(d, nominal))',
     'gbps[cm] = np.maximum(gbps[cm], p.link_gbps_at(d, nominal))'),
    # --- tracegen/emit/packets/items.py
    ('items-window-end-inclusive', 'tracegen/emit/packets/items.py',
     'keep = (t >= t_a) & (t < t_b)',
     'keep = (t >= t_a) & (t <= t_b)'),
    ('items-received-first-at-ties', 'tracegen/emit/packets/items.py',
     'order = np.lexsort((whole["rx"], whole["start"]))',
     'order = np.lexsort((~whole["rx"], whole["start"]))'),
    # --- tracegen/emit/packets/neighbors.py
    ('arp-announcement-opcode-reply', 'tracegen/emit/packets/neighbors.py',
     '1, 0x0800, 6, 4, 1, mac',
     '1, 0x0800, 6, 4, 2, mac'),
    ('nd-hop-limit-64', 'tracegen/emit/packets/neighbors.py',
     'len(body), 58, 255) + src',
     'len(body), 58, 64) + src'),
    # --- tracegen/emit/packets/port_queue.py
    ('port-queue-wire-rounded-down', 'tracegen/emit/packets/port_queue.py',
     'w = -(-line_wire_ns(p, it, g, j) * nic_gbps // port_gbps)',
     'w = line_wire_ns(p, it, g, j) * nic_gbps // port_gbps'),
    ('port-queue-state-not-carried', 'tracegen/emit/packets/port_queue.py',
     'head[0] = max(int(head[0]), free_at)',
     'head[0] = int(head[0])'),
    # --- tracegen/emit/packets/ports.py
    ('ports-running-max-inclusive-prefix', 'tracegen/emit/packets/ports.py',
     '    cw = np.cumsum(w) - w\n',
     '    cw = np.cumsum(w)\n'),
    ('ports-control-after-packets', 'tracegen/emit/packets/ports.py',
     '    place[:S] += 1\n',
     '    place[S:] += 1\n'),
    # --- tracegen/emit/packets/routes.py
    ('routes-odd-dir-is-a-to-b', 'tracegen/emit/packets/routes.py',
     'odd = (d & 1).astype(bool)',
     'odd = (d & 1) == 0'),
    ('routes-link-id-not-halved', 'tracegen/emit/packets/routes.py',
     'safe = np.maximum(d, 0) >> 1',
     'safe = np.maximum(d, 0)'),
    # --- tracegen/emit/packets/select.py
    ('select-collective-dims-and-kinds', 'tracegen/emit/packets/select.py',
     '                     | np.isin(op["kind"], list(self.kinds or ())))',
     '                     & np.isin(op["kind"], list(self.kinds or ())))'),
    ('select-kib-decimal', 'tracegen/emit/packets/select.py',
     '"kib": 1 << 10,',
     '"kib": 10**3,'),
    # --- tracegen/emit/pictures/plots.py
    ('plots-merge-end-not-accumulated', 'tracegen/emit/pictures/plots.py',
     's, e = start[o], np.maximum.accumulate(end[o])',
     's, e = start[o], end[o]'),
    ('plots-human-kib-decimal', 'tracegen/emit/pictures/plots.py',
     '("KiB", 1 << 10)):',
     '("KiB", 1000)):'),
    # --- tracegen/emit/pictures/style.py
    ('style-ms-axis-divides-by-us', 'tracegen/emit/pictures/style.py',
     '        return "ms", 1e6\n',
     '        return "ms", 1e3\n'),
    ('style-edp-colour-of-dp', 'tracegen/emit/pictures/style.py',
     'Dim.EDP: "#17becf"',
     'Dim.EDP: "#1f77b4"'),
    # --- tracegen/emit/pictures/timeline.py
    ('timeline-end-column-floor', 'tracegen/emit/pictures/timeline.py',
     'c1 = np.clip(np.ceil(end_ns / ns_per_col).astype(np.int64), c0 + 1, COLUMNS)',
     'c1 = np.clip((end_ns / ns_per_col).astype(np.int64), c0 + 1, COLUMNS)'),
    ('timeline-nvlink-upper-half', 'tracegen/emit/pictures/timeline.py',
     '((LinkKind.NET, False, 0), (LinkKind.NVLINK, True, 1))',
     '((LinkKind.NET, False, 1), (LinkKind.NVLINK, True, 0))'),
    # --- tracegen/emit/sims/ns3_compare.py
    ('ns3-compare-repeats-latest-first', 'tracegen/emit/sims/ns3_compare.py',
     'order = np.lexsort((np.arange(len(rows)), rows[:, 5]))',
     'order = np.lexsort((np.arange(len(rows)), -rows[:, 5]))'),
    ('ns3-compare-packets-floor', 'tracegen/emit/sims/ns3_compare.py',
     'packets = np.maximum(1, -(-sc.bytes // sc.config.pmtu))',
     'packets = np.maximum(1, sc.bytes // sc.config.pmtu)'),
    # --- tracegen/emit/sims/otg.py
    ('otg-kb-decimal', 'tracegen/emit/sims/otg.py',
     '("kb", 1 << 10)',
     '("kb", 1000)'),
    ('otg-mtu-1500-at-pmtu-1024-exclusive', 'tracegen/emit/sims/otg.py',
     'mtu = 1500 if out.pmtu <= 1024 else 9000',
     'mtu = 1500 if out.pmtu < 1024 else 9000'),
    # --- tracegen/emit/tables/read.py
    ('read-range-upper-inclusive', 'tracegen/emit/tables/read.py',
     'bad = np.flatnonzero((arr < lo) | (arr >= hi))',
     'bad = np.flatnonzero((arr < lo) | (arr > hi))'),
    ('read-csv-field-count-line-off-by-one', 'tracegen/emit/tables/read.py',
     'raise _bad(path, f"line {k + 2}", f"{len(row)} fields',
     'raise _bad(path, f"line {k + 1}", f"{len(row)} fields'),
    # --- tracegen/emit/tables/trace_view.py
    ('trace-view-util-bytes-as-bits', 'tracegen/emit/tables/trace_view.py',
     'util = busy * 8 / (gbps[:, None] * width)',
     'util = busy / (gbps[:, None] * width)'),
    ('trace-view-least-busy-links', 'tracegen/emit/tables/trace_view.py',
     'order = np.argsort(-util.sum(axis=1), kind="stable")[:top]',
     'order = np.argsort(util.sum(axis=1), kind="stable")[:top]'),
    # --- tracegen/emit/views/distributed.py
    ('dask-scheduler-port-zero', 'tracegen/emit/views/distributed.py',
     'if not m or not 1 <= int(m.group("port")) <= 65535:',
     'if not m or not 0 <= int(m.group("port")) <= 65535:'),
    ('dask-progress-counts-files', 'tracegen/emit/views/distributed.py',
     '            done += nbytes\n',
     '            done += 1\n'),
    # --- tracegen/emit/views/placed.py
    ('placed-chunks-by-chunk-then-step', 'tracegen/emit/views/placed.py',
     'seq = np.lexsort((cols["chunk"], cols["step"], row))',
     'seq = np.lexsort((cols["step"], cols["chunk"], row))'),
    ('placed-drops-received-rows', 'tracegen/emit/views/placed.py',
     'touch = net & (mask[np.maximum(r["src_nic"], 0)] | mask[np.maximum(r["dst_nic"], 0)])',
     'touch = net & mask[np.maximum(r["src_nic"], 0)]'),
    ('placed-block-drops-its-last-op', 'tracegen/emit/views/placed.py',
     '(todo[:, 0] <= block[-1][0])]',
     '(todo[:, 0] < block[-1][0])]'),
    ('placed-block-skips-an-op', 'tracegen/emit/views/placed.py',
     '            hi += 1\n        block = listed[lo:hi]',
     '            hi += 1\n        block = listed[lo:hi]\n        hi += 1'),
    # --- tracegen/timing/fluid_engine.py (no epochs: no per-item route copies)
    ('fluid-no-variants-entries-unowned', 'tracegen/timing/fluid_engine.py',
     '    if len(var_item) == 0:                       # no route variants',
     '    if len(var_item) < 0:                        # no route variants'),
    ('conn-rows-in-key-order', 'tracegen/timing/connections.py',
     'return (conns, key_conn[inv.reshape(-1)]) if rows else conns',
     'return (conns, inv.reshape(-1)) if rows else conns'),
    # --- tracegen/timing/order.py
    ('order-counts-at-own-key', 'tracegen/timing/order.py',
     'start[keys[i] + 1] += 1',
     'start[keys[i]] += 1'),
    # --- tracegen/timing/detail.py
    ('detail-auto-limit-exclusive', 'tracegen/timing/detail.py',
     'transfers <= FULL_DETAIL_MAX_TRANSFERS else "conn"',
     'transfers < FULL_DETAIL_MAX_TRANSFERS else "conn"'),
    ('detail-auto-ignores-emit', 'tracegen/timing/detail.py',
     'return "full" if emit or transfers',
     'return "full" if transfers'),
    # --- tracegen/timing/fluid_records.py
    ('fluid-bin-first-part-whole-bin', 'tracegen/timing/fluid_records.py',
     'v[m] * ((b0[m] + 1) * bin_ns - a[m])',
     'v[m] * bin_ns'),
    ('fluid-within-takes-change-at-t1', 'tracegen/timing/fluid_records.py',
     'b = np.searchsorted(key, items * span + np.maximum(t1, 0), "left")',
     'b = np.searchsorted(key, items * span + np.maximum(t1, 0), "right")'),
    # --- tracegen/config/schema.py
    ('schema-time-max-inclusive', 'tracegen/config/schema.py',
     'out.update(minimum=0, maximum=TIME_MAX_NS - 1, maxLength=64',
     'out.update(minimum=0, maximum=TIME_MAX_NS, maxLength=64'),
    ('schema-us-unit-ns', 'tracegen/config/schema.py',
     '("_us", "µs")',
     '("_us", "ns")'),
    # --- tracegen/scenario/ (issue 23: several jobs on one fabric)
    ('scenario-interleave-no-round-robin', 'tracegen/scenario/place.py',
     'node, i = node + 1, (i + 1) % len(need)',
     'node, i = node + 1, i'),
    ('scenario-start-offset-lost', 'tracegen/scenario/run.py',
     'rows["gap_ns"][ops.deps.lengths() == 0] += start_ns',
     'rows["gap_ns"][ops.deps.lengths() == 0] += 0'),
    ('scenario-slowdown-inverted', 'tracegen/scenario/run.py',
     'return self.jct_ns / self.alone_jct_ns if self.alone_jct_ns else float("nan")',
     'return self.alone_jct_ns / self.jct_ns if self.jct_ns else float("nan")'),
    ('scenario-resilient-rehashes-all', 'tracegen/scenario/events.py',
     'hit = (used & (nid < 0)).any(axis=1)',
     'hit = used.any(axis=1)'),
    ('scenario-straggler-ignored', 'tracegen/scenario/events.py',
     'factor = np.where(hit, np.maximum(factor, e.factor), factor)',
     'factor = np.where(hit, factor, factor)'),
    ('scenario-nccl-not-compared', 'tracegen/scenario/spec.py',
     'for f in fields(first.nccl):',
     'for f in fields(first.nccl)[:0]:'),
    ('scenario-incast-ring', 'tracegen/scenario/patterns.py',
     'items = [(CollKind.SENDRECV, Dim.PP, [src, 0], 1) for src in range(1, ranks)]',
     'items = [(CollKind.SENDRECV, Dim.PP, [src, (src + 1) % ranks], 1) for src in range(1, ranks)]'),
    # --- events during the run (issue 23: timed events, flaps, flows in flight move)
    ('timed-in-flight-items-stay', 'tracegen/timing/fluid_moves.py',
     '            if cur[i] == v:\n                continue',
     '            if cur[i] == v or active[i]:\n                continue'),
    ('timed-capacity-unchanged', 'tracegen/timing/fluid_moves.py',
     'cap[ln] = evc_cap[k]',
     'cap[ln] = cap[ln]'),
    ('timed-moved-items-never-return', 'tracegen/timing/fluid_moves.py',
     'tgt[st_item[k]] = st_item[k]',
     'tgt[st_item[k]] = cur[st_item[k]]'),
    ('timed-until-ignored', 'tracegen/scenario/events.py',
     'np.flatnonzero((at <= t) & (t < until))',
     'np.flatnonzero(at <= t)'),
    ('epoch-capacity-in-bytes-per-4ns', 'tracegen/timing/epochs.py',
     'cap = np.repeat(e.gbps.astype(np.float64), 2) / 8.0',
     'cap = np.repeat(e.gbps.astype(np.float64), 2) / 4.0'),
    ('scenario-degrade-above-rate-accepted', 'tracegen/scenario/events.py',
     'if e.gbps >= nominal:',
     'if e.gbps > 10 * nominal:'),
    ('scenario-link-rate-of-t0', 'tracegen/scenario/link_split.py',
     'rate = np.maximum(rate, e.gbps)',
     'rate = np.minimum(rate, rate)'),
    ('flap-period-without-up', 'tracegen/scenario/spec_events.py',
     'at_ns=at + k * (down + up),',
     'at_ns=at + k * down,'),
    ('scenario-link-time-unscaled', 'tracegen/scenario/link_split.py',
     'acc = shares * total[lk]',
     'acc = acc + 0 * shares'),
    # --- scenario outputs (issue 23: exact link split, pcaps per connection)
    ('scenario-split-rate-kept-after-finish', 'tracegen/scenario/link_split.py',
     '(end, it[last] * n_ep + ep_of(end - 1), -v[last])',
     '(end, it[last] * n_ep + ep_of(end - 1), 0 * v[last])'),
    ('scenario-split-rates-added-not-replaced', 'tracegen/scenario/link_split.py',
     'dv = v - np.where(first, 0.0, np.r_[0.0, v[:-1]])',
     'dv = v + 0 * np.where(first, 0.0, np.r_[0.0, v[:-1]])'),
    ('scenario-split-qp-share-lost', 'tracegen/scenario/link_split.py',
     'vweights.append(c_w[pos] * ebytes[rows]',
     'vweights.append(1.0 * ebytes[rows]'),
    ('scenario-split-epochs-ignored', 'tracegen/scenario/link_split.py',
     'csrs += [_conn_csr(t, q, len(c)) for t in tables]',
     'csrs += [c.link_csr() for t in tables]'),
    ('ns3-link-event-rate-unchanged', 'tracegen/emit/sims/ns3_events.py',
     'changed = np.flatnonzero(e.gbps != rates)',
     'changed = np.flatnonzero((e.gbps != rates) & (e.gbps == 0))'),
    # --- switch views of a scenario whose links change mid-run (issue 23: epoch_paths.py)
    ('epoch-route-of-epoch-0', 'tracegen/emit/packets/epoch_paths.py',
     'p.m_route = ep.fwd[t[m_ep], p.m_conn]',
     'p.m_route = ep.fwd[t[m_ep * 0], p.m_conn]'),
    ('epoch-message-never-moved', 'tracegen/emit/packets/epoch_paths.py',
     'np.maximum.at(m_ep, s.msg[hit], e[hit])',
     'np.maximum.at(m_ep, s.msg[hit], e[hit] * 0)'),
    ('epoch-qp-order-lost', 'tracegen/emit/packets/epoch_paths.py',
     'arrive = running_max(order, qp_dir, arrive, np.ones(len(arrive), np.int64))',
     'arrive = arrive'),
    ('epoch-rate-of-t0', 'tracegen/emit/packets/plan.py',
     'gbps = self.link_gbps_ep[np.maximum(e, 0), d >> 1]',
     'gbps = self.link_gbps_ep[np.maximum(e, 0) * 0, d >> 1]'),
    ('epoch-rate-drop-in-queue-ignored', 'tracegen/emit/packets/hops.py',
     'for _ in range(RATE_ROUNDS if p.epoch_ns is not None else 0):',
     'for _ in range(0):'),
    ('epoch-macs-of-t0-route', 'tracegen/emit/packets/frames.py',
     'route = p.route_of(kind, m, acked)',
     'route = None'),
    ('placed-class-lost', 'tracegen/emit/views/placed.py',
     'nic_sharing=flows.nic_sharing, op_tc=flows.op_tc)',
     'nic_sharing=flows.nic_sharing, op_tc=None)'),
    # --- output.ecn_marking=queue at the leaf's port to the receiving NIC (issue 24)
    ('queue-nic-port-not-queued', 'tracegen/emit/packets/queue_marks.py',
     '    rows.append((True, d, pos, p.m_pkt0[m] + k, m, k, t - lat(d)))\n',
     '    pass\n'),
    ('queue-nic-port-leaves-at-nic-time', 'tracegen/emit/packets/queue_marks.py',
     'rows.append((True, d, pos, p.m_pkt0[m] + k, m, k, t - lat(d)))',
     'rows.append((True, d, pos, p.m_pkt0[m] + k, m, k, t))'),
    ('pfc-merged-pause-at-nic-time', 'tracegen/emit/packets/pfc.py',
     't = pz.slot_ns if as_sent else pz.at_nic_ns',
     't = pz.at_nic_ns'),
    ('counters-nic-port-marks-dropped', 'tracegen/emit/views/counters.py',
     'if len(p.ce_g) and p.ce_pos is not None:',
     'if len(p.ce_g) and p.ce_pos is not None and is_a is not None:'),
    # --- switches pausing switches in one forward pass (issue 24, pfc_pass.py)
    ('pfc-pass-pauses-the-nic', 'tracegen/emit/packets/pfc_pass.py',
     '                up = path[f, h - 1]\n',
     '                up = path[f, 0]\n'),
    ('pfc-pass-paused-port-sends', 'tracegen/emit/packets/pfc_pass.py',
     'if paused[s] > t:',
     'if paused[s] > t + 200:'),
    ('pfc-pass-no-refresh', 'tracegen/emit/packets/pfc_pass.py',
     'if owner[a] == b and rtime[a] == t and qbytes[b] > xon:',
     'if owner[a] == b and rtime[a] == t and qbytes[b] > xon and t < 0:'),
    ('pfc-pass-xon-early', 'tracegen/emit/packets/pfc_pass.py',
     'if qbytes[s] <= xon < qbytes[s] + fbytes[f]:',
     'if qbytes[s] <= xoff < qbytes[s] + fbytes[f]:'),
    ('pfc-pass-pause-cuts-frame', 'tracegen/emit/packets/pfc_pass.py',
     '    start = max(t, busy[rp])\n',
     '    start = t\n'),
    ('pfc-pass-ack-does-not-wait', 'tracegen/emit/packets/pfc_plan.py',
     'PAUSE_FRAME_BYTES + WIRE_OVERHEAD_BYTES, rev, after, slack, prev)',
     'PAUSE_FRAME_BYTES + WIRE_OVERHEAD_BYTES, rev, None, None, prev)'),
    ('pfc-pass-follower-loses-spacing', 'tracegen/emit/packets/pfc_pass.py',
     'r = max(r, rel[prev[d]] + ready[d] - ready[prev[d]])',
     'r = max(r, rel[prev[d]])'),
    ('pfc-pass-segs-ignore-gaps', 'tracegen/emit/packets/pfc_plan.py',
     ' | (t[1:] != t[:-1] + gap)]',
     ']'),
    ('pfc-pass-rx-without-latency', 'tracegen/emit/packets/pfc_plan.py',
     'pp.res.depart_ns[rows, last] + p.link_lat[route >> 1], w)',
     'pp.res.depart_ns[rows, last], w)'),
    ('pfc-pass-hops-previous-port', 'tracegen/emit/packets/pfc_plan.py',
     'segs = _runs(p, pp.g[fd], pp.res.depart_ns[fd, pd], spacing(p, gbps))',
     'segs = _runs(p, pp.g[fd], pp.res.depart_ns[fd, pd - 1], spacing(p, gbps))'),
    ('pfc-pass-control-rx-first-port', 'tracegen/emit/packets/pfc_plan.py',
     'return pp.res.depart_ns[rows, 0], pp.res.depart_ns[rows, last] + lat',
     'return pp.res.depart_ns[rows, 0], pp.res.depart_ns[rows, 0] + lat'),
    # --- the pass wired into queue mode's schedule and captures (queue_rounds.apply_pass)
    ('pfc-wiring-nic-times-from-schedule', 'tracegen/emit/packets/queue_rounds.py',
     '    p.tx = pfc_plan.segs_at(p, pp, 0)\n',
     '    pass\n'),
    ('pfc-wiring-runs-not-cut-for-ip-ids', 'tracegen/emit/packets/queue_rounds.py',
     'starts = np.sort(p.m_pkt0[p.tx.msg] + p.tx.ka)',
     'starts = np.zeros(0, np.int64)'),
    ('pfc-wiring-link-files-without-pfc', 'tracegen/emit/views/files.py',
     'specs.append(FileSpec(f"{name}-{other_name}", [iface], parts, pauses=pfc.link_records(p, fabric, link)))',
     'specs.append(FileSpec(f"{name}-{other_name}", [iface], parts))'),
    ('pfc-pass-pause-acts-at-first-bit', 'tracegen/emit/packets/pfc_pass.py',
     '                    t_up = start + w + lat[f, h - 1]\n',
     '                    t_up = start + lat[f, h - 1]\n'),
    ('counters-pfc-rx-counted-as-tx', 'tracegen/emit/views/counters.py',
     '(ptx if fr[6:12] == mac else prx)[prio] += 1',
     'ptx[prio] += 1'),
]

DEFAULT_TESTS = ("tests/test_schedule_validator.py tests/test_fabric.py tests/test_detail.py "
                 "tests/test_compute_closed_forms.py tests/test_psn_wrap.py "
                 "tests/test_report_asym.py tests/test_timing_closed_forms.py tests/test_examples.py "
                 "tests/test_workload.py tests/test_topology.py tests/test_collectives.py")

# Test files that judge a module through another one's API (so they do not name it): a partial
# run (--related-only) runs them too.
COLLECTIVE_TESTS = ["tests/test_collectives.py", "tests/test_judge_collectives.py", "tests/test_ring_edges.py", "tests/test_trees.py",
                    "tests/test_ring_shard.py"]
ALSO_RELATED = {
    "tracegen/emit/packets/queue_marks.py": ["tests/test_queue_incast.py", "tests/test_queue_marks.py"],
    "tracegen/emit/packets/pfc.py": ["tests/test_queue_incast.py", "tests/test_queue_marks.py"],
    "tracegen/emit/packets/pfc_pass.py": ["tests/test_queue_spine.py", "tests/test_queue_incast.py", "tests/test_queue_marks.py"],
    "tracegen/emit/packets/pfc_plan.py": ["tests/test_queue_spine.py", "tests/test_queue_incast.py", "tests/test_queue_marks.py"],
    "tracegen/emit/views/counters.py": ["tests/test_queue_incast.py", "tests/test_queue_marks.py"],
    "tracegen/scenario/spec.py": ["tests/test_scenario.py", "tests/test_bad_commands.py",
                                  "tests/test_scenario_timed_events.py"],
    "tracegen/scenario/patterns.py": ["tests/test_scenario.py"],
    "tracegen/scenario/report.py": ["tests/test_scenario_outputs.py", "tests/test_scenario.py"],
    "tracegen/scenario/link_split.py": ["tests/test_scenario_outputs.py", "tests/test_scenario_timed_events.py",
                                        "tests/test_valid_scenarios.py"],
    "tracegen/scenario/saved.py": ["tests/test_scenario_outputs.py", "tests/test_bad_commands.py"],
    "tracegen/scenario/spec_events.py": ["tests/test_scenario.py", "tests/test_bad_commands.py",
                                         "tests/test_scenario_timed_events.py"],
    "tracegen/scenario/spec_values.py": ["tests/test_scenario.py", "tests/test_bad_commands.py"],
    "tracegen/emit/views/placed.py": ["tests/test_placed.py", "tests/test_scenario_outputs.py"],
    "tracegen/emit/sims/ns3_events.py": ["tests/test_scenario_outputs.py"],
    "tracegen/emit/packets/epoch_paths.py": ["tests/test_scenario_epoch_views.py"],
    "tracegen/scenario/events.py": ["tests/test_scenario.py", "tests/test_scenario_timed_events.py",
                                    "tests/test_valid_scenarios.py"],
    "tracegen/emit/packets/roce.py": ["tests/test_psn_wrap.py", "tests/test_judge_ip_ids.py", "tests/test_pcap_views.py"],
    "tracegen/emit/packets/pacing.py": ["tests/test_judge_ip_ids.py", "tests/test_judge_cnp_routes.py", "tests/test_pcap.py",
                                        "tests/test_pcap_congestion.py"],
    "tracegen/emit/packets/schedule.py": ["tests/test_judge_ip_ids.py", "tests/test_pcap.py", "tests/test_pcap_congestion.py",
                                          "tests/test_ack_rounds.py"],
    "tracegen/emit/packets/cnps.py": ["tests/test_judge_cnp_routes.py", "tests/test_pcap_congestion.py"],
    "tracegen/emit/packets/queue_rounds.py": ["tests/test_queue_incast.py", "tests/test_queue_marks.py", "tests/test_queue_spine.py"],
    "tracegen/config/rules.py": ["tests/test_config.py", "tests/test_bad_input.py"],
    "tracegen/config/values.py": ["tests/test_config.py", "tests/test_bad_input.py"],
    "tracegen/output/ownership.py": ["tests/test_output_guard.py", "tests/test_outdir.py"],
    "tracegen/output/guard.py": ["tests/test_output_guard.py", "tests/test_outdir.py"],
    "tracegen/output/place.py": ["tests/test_outdir.py", "tests/test_output_guard.py"],
    "tracegen/output/put.py": ["tests/test_output_guard.py", "tests/test_outdir.py"],
    "tracegen/emit/views/lab.py": ["tests/test_pcap_lab.py"],
    "tracegen/emit/packets/plan.py": ["tests/test_pcap_wire.py", "tests/test_pcap.py"],
    "tracegen/emit/packets/plan_build.py": ["tests/test_pcap_wire.py", "tests/test_pcap.py"],
    "tracegen/emit/packets/rate_curve.py": ["tests/test_pacing_trajectory.py", "tests/test_pcap.py"],
    "tracegen/emit/views/files.py": ["tests/test_switch_views.py", "tests/test_pcap_views.py", "tests/test_queue_incast.py"],
    "tracegen/timing/fluid.py": ["tests/test_judge_fluid.py"],
    "tracegen/timing/alltoall_agg.py": ["tests/test_moe_scale.py"],
    "tracegen/timing/epochs.py": ["tests/test_scenario_timed_events.py"],
    "tracegen/fabric/timeline.py": ["tests/test_scenario_timed_events.py"],
    "tracegen/timing/fluid_engine.py": ["tests/test_judge_fluid.py", "tests/test_fluid_maxmin.py",
                                        "tests/test_scenario_timed_events.py"],
    "tracegen/timing/fluid_solve.py": ["tests/test_judge_fluid.py", "tests/test_fluid_maxmin.py"],
    "tracegen/timing/fluid_moves.py": ["tests/test_scenario_timed_events.py"],
    "tracegen/timing/fluid_heap.py": ["tests/test_judge_fluid.py", "tests/test_fluid_maxmin.py"],
    "tracegen/emit/packets/capture_file.py": ["tests/test_judge_pcapng_blocks.py", "tests/test_pcap.py"],
    "tracegen/emit/packets/frames.py": ["tests/test_judge_ip_ids.py", "tests/test_psn_wrap.py", "tests/test_pcap.py"],
    "tracegen/emit/packets/addresses.py": ["tests/test_switch_views.py"],
    "tracegen/emit/packets/congestion.py": ["tests/test_pcap_congestion.py"],
    "tracegen/emit/packets/nccl_net.py": ["tests/test_pcap_nccl.py"],
    "tracegen/timing/schedule_conn.py": ["tests/test_judge_conn.py", "tests/test_detail.py"],
    "tracegen/timing/conn_edges.py": ["tests/test_judge_conn.py", "tests/test_detail.py"],
    "tracegen/timing/conn_items.py": ["tests/test_judge_conn.py", "tests/test_detail.py"],
    "tracegen/emit/bundle.py": ["tests/test_judge_emit_small.py"],
    "tracegen/config/schema.py": ["tests/test_job_schema.py"],
    "tracegen/fabric/ecmp_hash.py": ["tests/test_fabric.py", "tests/test_ns3_export.py"],
    "tracegen/fabric/route_graph.py": ["tests/test_fabric.py", "tests/test_ns3_export.py"],
    "tracegen/workload/blocks.py": ["tests/test_judge_workload.py", "tests/test_workload.py", "tests/test_megatron.py"],
    "tracegen/workload/iteration.py": ["tests/test_judge_workload.py", "tests/test_workload.py", "tests/test_megatron.py",
                                       "tests/test_parallelism.py"],
    "tracegen/workload/grad_sync.py": ["tests/test_judge_workload.py", "tests/test_workload.py"],
    "tracegen/emit/sims/ns3_compare.py": ["tests/test_judge_emit_small.py"],
    "tracegen/emit/sims/otg.py": ["tests/test_export_otg.py"],
    "tracegen/emit/packets/hops.py": ["tests/test_pcap.py"],     # its test_timing: arrival >= sent + hops x latency
    "tracegen/emit/pictures/timeline.py": ["tests/test_judge_emit_small.py"],
    "tracegen/timing/detail.py": ["tests/test_judge_emit_small.py"],
    "tracegen/emit/views/distributed.py": ["tests/test_judge_emit_small.py"],
    "tracegen/emit/packets/copies.py": ["tests/test_switch_views.py", "tests/test_pcap.py", "tests/test_pcap_views.py"],
    "tracegen/emit/packets/items.py": ["tests/test_judge_emit_small.py", "tests/test_pcap.py", "tests/test_pcap_select.py", "tests/test_pcap_views.py"],
    "tracegen/emit/packets/neighbors.py": ["tests/test_pcap_lab.py"],
    "tracegen/emit/packets/port_queue.py": ["tests/test_judge_emit_small.py", "tests/test_pcap_lab.py", "tests/test_port_spacing.py"],
    "tracegen/emit/packets/ports.py": ["tests/test_pcap.py", "tests/test_port_spacing.py", "tests/test_timing_closed_forms.py", "tests/test_pcap_views.py"],
    "tracegen/emit/packets/routes.py": ["tests/test_switch_views.py", "tests/test_pcap_views.py"],
    "tracegen/emit/packets/select.py": ["tests/test_judge_emit_small.py", "tests/test_pcap_select.py", "tests/test_bad_input.py"],
    "tracegen/emit/pictures/plots.py": ["tests/test_judge_emit_small.py", "tests/test_timeline.py", "tests/test_outputs.py"],
    "tracegen/emit/pictures/style.py": ["tests/test_judge_emit_small.py", "tests/test_timeline.py", "tests/test_outputs.py"],
    "tracegen/emit/tables/read.py": ["tests/test_judge_emit_small.py", "tests/test_bad_commands.py", "tests/test_outputs.py", "tests/test_fabric.py"],
    "tracegen/emit/tables/trace_view.py": ["tests/test_judge_emit_small.py", "tests/test_judge_report.py", "tests/test_fabric.py", "tests/test_outputs.py"],
    "tracegen/timing/fluid_records.py": ["tests/test_judge_emit_small.py", "tests/test_pacing_trajectory.py", "tests/test_judge_fluid.py", "tests/test_fabric.py"],
    # modules reached through the tracegen.collectives package (no test imports them by name)
    **{f"tracegen/collectives/{m}.py": COLLECTIVE_TESTS
       for m in ("alltoall", "edges", "halving_doubling", "hierarchical", "p2p", "protocol", "ring", "ring_edges")},
    "tracegen/collectives/edges.py": ["tests/test_judge_wire_bytes.py", "tests/test_judge_conn.py", *COLLECTIVE_TESTS],
    "tracegen/emit/sims/rank_steps.py": ["tests/test_export.py", "tests/test_export_consumers.py"],
    "tracegen/emit/sims/simai.py": ["tests/test_export_consumers.py", "tests/test_export.py"],
    "tracegen/report/build.py": ["tests/test_judge_report.py", "tests/test_detail.py"],
    "tracegen/emit/tables/perfetto.py": ["tests/test_judge_tables.py", "tests/test_outputs.py"],
    "tracegen/fabric/topology_file.py": ["tests/test_fabric_file.py", "tests/test_fabric.py"],
    "tracegen/fabric/kinds.py": ["tests/test_fabric.py", "tests/test_judge_fabric.py"],
}

COPY = ("tracegen", "tests", "tools", "traces/examples", "templates", "ns3_scenarios", "pyproject.toml",
        "README.md", "docs")


def _copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for item in COPY:
        src = ROOT / item
        if src.is_dir():
            shutil.copytree(src, dest / item, ignore=ignore)
        elif src.exists():
            (dest / item).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / item)


def related_tests(path: str, tests: list[str]) -> list[str]:
    """Test files (within `tests`) that name the mutated module: its dotted name, or its leaf
    name in an import. They run first, so a caught mutation costs seconds, not the whole suite;
    the files that name it most often (the most specific) come first."""
    mod = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    leaf = mod.rsplit(".", 1)[-1]
    pat = re.compile(rf"{re.escape(mod)}\b|import[^\n]*\b{re.escape(leaf)}\b|\b{re.escape(leaf)}\.py\b")
    files: list[Path] = []
    for t in tests:
        p = ROOT / t.split("::")[0]
        files += sorted(p.rglob("test_*.py")) if p.is_dir() else [p] if p.suffix == ".py" else []
    hits = [(len(pat.findall(f.read_text(errors="replace"))), f) for f in files]
    return [str(f.relative_to(ROOT)) for n, f in sorted(hits, key=lambda h: (-h[0], str(h[1]))) if n]


def check_mutations(root: Path = ROOT) -> list[str]:
    """Problems with MUTATIONS against the checkout at `root` (empty: every mutation applies):
    a name used twice, an edit that changes nothing, an old text not found exactly once."""
    problems, seen = [], set()
    for name, path, old, new in MUTATIONS:
        if name in seen:
            problems.append(f"{name}: the name is used twice")
        seen.add(name)
        if old == new:
            problems.append(f"{name}: the edit changes nothing")
        f = root / path
        n = f.read_text().count(old) if f.exists() else -1
        if n != 1:
            problems.append(f"{name}: {path}: " + ("no such file" if n < 0 else
                            f"the old text occurs {n} times (expected once): update the mutation"))
    return problems


# Each concurrent run has a slot: a fixed folder the checkout is copied into afresh per mutation,
# beside a numba cache that stays. The copies keep their files' mtimes and the same path, so numba
# finds every unmutated module's compiled functions (cache stamp: path, mtime, size) and compiles
# only the mutated one: seconds instead of a minute per mutation.
SLOTS = Path(tempfile.gettempdir()) / f"tracegen-mutate-{os.getuid()}"
_free_slots: "queue.Queue[Path]" = queue.Queue()


DESELECT: list[str] = []     # --deselect: tests that fail on the unmutated code (they would "catch" anything)


def run_one(name: str, path: str, old: str, new: str, tests: list[str], timeout: int,
            test_timeout: int, related_only: bool = False) -> tuple[str, str, float]:
    """(verdict, first failing test or note, seconds) for one mutation."""
    slot = _free_slots.get()
    try:
        return _run_in(slot, name, path, old, new, tests, timeout, test_timeout, related_only)
    finally:
        shutil.rmtree(slot / "tree", ignore_errors=True)
        _free_slots.put(slot)


def _run_in(slot: Path, name: str, path: str, old: str, new: str, tests: list[str], timeout: int,
            test_timeout: int, related_only: bool) -> tuple[str, str, float]:
    work = slot / "tree"
    shutil.rmtree(work, ignore_errors=True)
    _copy_tree(work)
    target = work / path
    text = target.read_text()
    if text.count(old) != 1:
        return "stale", f"{path}: the old text occurs {text.count(old)} times (expected once)", 0.0
    target.write_text(text.replace(old, new))
    env = dict(os.environ, PYTHONPATH=str(work), PYTHONDONTWRITEBYTECODE="1",
               NUMBA_CACHE_DIR=str(slot / "numba-cache"))
    env.pop("TRACEGEN_CI", None)
    order = list(dict.fromkeys([*ALSO_RELATED.get(path, ()), *related_tests(path, tests)]))
    if not related_only:
        order += tests                              # pytest runs a path given twice once
    elif not order:
        return "no-tests", "no test file names the module", 0.0
    t0 = time.perf_counter()
    try:
        res = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
                              "-o", "addopts=", f"--timeout={test_timeout}",
                              *(a for d in DESELECT for a in ("--deselect", d)), *order], cwd=work,
                             env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        # under --related-only the budget is short: not caught within it, not a proven hang
        return ("budget" if related_only else "hang"), f"the run passed {timeout} s", time.perf_counter() - t0
    secs = time.perf_counter() - t0
    if res.returncode == 0:
        return "MISSED", "all passed: " + (res.stdout.strip().splitlines() or ["?"])[-1], secs
    failed = [ln.split(" ", 1)[1].split(" - ")[0] for ln in res.stdout.splitlines() if ln.startswith("FAILED ")]
    errors = [ln.split(" ", 1)[1].split(" - ")[0] for ln in res.stdout.splitlines() if ln.startswith("ERROR ")]
    first = (failed or errors or [f"pytest exit {res.returncode}"])[0]
    if "Timeout" in res.stdout and not failed:
        first += " (per-test timeout)"
    return "caught", first, secs


README_BEGIN, README_END = "<!-- mutate.py table: begin -->", "<!-- mutate.py table: end -->"


TABLE_HEAD = "| mutation | file | verdict | first failing test | s | run |"


def _take_slots(n: int) -> list[Path]:
    """n slot folders no other mutate.py run holds (a flock each, held until this process ends)."""
    got, k = [], 0
    while len(got) < n:
        d = SLOTS / f"slot-{k}"
        d.mkdir(parents=True, exist_ok=True)
        fd = os.open(d / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            got.append(d)
        except BlockingIOError:
            os.close(fd)
        k += 1
    return got


def write_readme(rows: dict[str, str]) -> int:
    """Merge this run's rows into README.md's table (between its markers): every mutation keeps
    its last verdict, the run column says how and when it was run; mutations not run are counted."""
    readme = ROOT / "README.md"
    text = readme.read_text()
    if README_BEGIN not in text or README_END not in text:
        print(f"README.md has no {README_BEGIN} ... {README_END} markers", file=sys.stderr)
        return 2
    head, rest = text.split(README_BEGIN, 1)
    body, tail = rest.split(README_END, 1)
    kept = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 6 and cells[0] != "mutation":
            kept[cells[0]] = line
    kept.update(rows)
    lines = [kept[m[0]] for m in MUTATIONS if m[0] in kept]
    caught = sum(" | caught | " in ln for ln in lines)
    related = sum(ln.rstrip(" |").rsplit("|", 1)[-1].strip().startswith("related") for ln in lines)
    n = len(MUTATIONS)
    summary = (f"{caught} of the {len(lines)} mutations run caught ({100 * caught / max(1, len(lines)):.1f} %); "
               f"{n - len(lines)} of all {n} not run yet. "
               f"The last verdict of each: run `related` = `--related-only`, a PARTIAL run over only the "
               f"test files that name the mutated module ({related} rows); `suite` = the --tests given. "
               "Regenerate: `python tools/mutate.py --related-only --timeout 300 --readme` "
               "(add `-m NAME` for some).")
    readme.write_text(head + README_BEGIN + "\n" + summary + "\n\n" + TABLE_HEAD + "\n|---|---|---|---|---|---|\n"
                      + "\n".join(lines) + "\n" + README_END + tail)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--mutation", action="append", help="run only these mutations (by name)")
    ap.add_argument("--tests", default=DEFAULT_TESTS, help="pytest arguments (space-separated paths / node ids)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per mutation (the whole run)")
    ap.add_argument("--test-timeout", type=int, default=600, help="seconds per test (pytest-timeout)")
    ap.add_argument("--jobs", type=int, default=1, help="mutations run side by side")
    ap.add_argument("--readme", action="store_true", help="write the table into README.md between its markers")
    ap.add_argument("--list", action="store_true", help="print the mutations and exit")
    ap.add_argument("--deselect", action="append", default=[],
                    help="a test (node id) to leave out: one that fails on the unmutated code")
    ap.add_argument("--check", action="store_true",
                    help="only verify that every mutation's text is found once (exit 1 if not)")
    ap.add_argument("--related-only", action="store_true",
                    help="a PARTIAL run: per mutation only the test files that name its module "
                         "(found within --tests, default: tests/)")
    args = ap.parse_args()
    if args.check:
        problems = check_mutations()
        print("\n".join(problems) or f"all {len(MUTATIONS)} mutations apply")
        return 1 if problems else 0
    DESELECT[:] = args.deselect
    if args.related_only and args.tests == DEFAULT_TESTS:
        args.tests = "tests"
    chosen = [m for m in MUTATIONS if not args.mutation or m[0] in args.mutation]
    if args.mutation and len(chosen) != len(set(args.mutation)):
        known = ", ".join(m[0] for m in MUTATIONS)
        ap.error(f"unknown mutation; known: {known}")
    if args.list:
        for name, path, old, new in chosen:
            print(f"{name}: {path}: {old!r} -> {new!r}")
        return 0
    if args.readme and not all(m in (ROOT / "README.md").read_text() for m in (README_BEGIN, README_END)):
        ap.error(f"README.md has no {README_BEGIN} ... {README_END} markers")
    tests = args.tests.split()
    scope = (f"PARTIAL run: only the related test files (those naming the module) within {args.tests}"
             if args.related_only else f"tests: {args.tests}")
    print(f"{len(chosen)} mutations, {scope}", flush=True)
    rows: dict[str, str] = {}
    bad = 0
    run = f"{'related' if args.related_only else 'suite'}, {time.strftime('%Y-%m-%d', time.gmtime())}"
    for slot in _take_slots(max(1, args.jobs)):
        _free_slots.put(slot)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(run_one, *m, tests, args.timeout, args.test_timeout, args.related_only): m for m in chosen}
        for fut in as_completed(futures):
            name, path, _, _ = futures[fut]
            verdict, note, secs = fut.result()
            bad += verdict != "caught"
            rows[name] = f"| {name} | `{path}` | {verdict} | `{note}` | {secs:.0f} | {run} |"
            print(rows[name], flush=True)
            if args.readme:                       # row by row: a run cut short keeps what it found
                write_readme({name: rows[name]})
    table = [TABLE_HEAD, "|---|---|---|---|---|---|"] + [rows[m[0]] for m in chosen]
    summary = f"{len(chosen) - bad} of {len(chosen)} caught ({100 * (len(chosen) - bad) / max(1, len(chosen)):.0f} %)"
    if args.related_only:
        summary += " - a partial run: related test files only"
    print("\n" + "\n".join(table) + "\n\n" + summary)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
