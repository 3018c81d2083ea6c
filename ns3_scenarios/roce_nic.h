// A RoCE-like NIC for mainline ns-3 (which has no RDMA module), plus the dependency-aware replay
// that drives it. Loaded at run time with cppyy.cppdef; all per-packet and per-event work stays
// in C++ (Python only fills the tables before the run and reads the results after it).
//
// Replay (an event-driven DAG of CommOps and flow.txt lines; inputs.py derives the tables):
//   - op o is released at max(simulated completion of its dep ops) + gap(o); an op without deps
//     at t0 + gap(o) (its analytic release).
//   - line k starts at max(release(op) + relOff(k), max over predecessor lines j of
//     end(j) + edgeGap(j, k)) + extraGap(k); a line whose op has no deps and which has no
//     transfer deps starts at its flow.txt time instead (fixedStartPs >= 0).
//   - op o completes once released and all its lines have completed, at
//     max(release + tail(o), max over its lines k of end(k) + post(k)); an op without lines
//     (NVLink-only, markers) at release + tail(o).
//
// Wire format: RoCEv2 on UDP 4791, one RC RDMA WRITE-with-immediate message per flow:
//   WRITE First 0x06 (BTH+RETH) / Middle 0x07 (BTH) / Last-Imm 0x09 (BTH+ImmDt), or Only-Imm 0x0B,
//   PSN per QP from 0, A bit on the last packet, payload padded to 4 B (PadCnt), 4 B ICRC (left
//   zero: nothing in the simulation checks it and tshark does not verify it).
// The responder answers the last packet with an ACK (0x11 + AETH) and, at most once per
// `cnpIntervalPs` per QP, CE-marked packets with a CNP (0x81, BECN set, DestQP = requester QP).
// Data IP ToS 0x6A (DSCP 26, ECT(0)); CNP ToS 0xC2 (DSCP 48).
//
// Pacing: one packet at a time at line rate, round robin over the active QPs (like a NIC's
// send scheduler); the next packet leaves when the current one and the interframe gap are done,
// so the host queue stays empty. With DCQCN on, a QP is also held to its own rate.
#pragma once

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>
#include <vector>

namespace tracegen
{

class RoceNic;

enum : uint8_t
{
    OP_WRITE_FIRST = 0x06,
    OP_WRITE_MIDDLE = 0x07,
    OP_WRITE_LAST_IMM = 0x09,
    OP_WRITE_ONLY_IMM = 0x0B,
    OP_ACK = 0x11,
    OP_CNP = 0x81,
};

const uint16_t ROCE_PORT = 4791;
const uint32_t BTH_BYTES = 12, RETH_BYTES = 16, IMM_BYTES = 4, ICRC_BYTES = 4, AETH_BYTES = 4;
const uint32_t PPP_BYTES = 2, IPV4_BYTES = 20, UDP_BYTES = 8;

// DCQCN reaction point (Zhu et al., SIGCOMM 2015), set from HPCC's config.txt keys.
struct Dcqcn
{
    bool enabled = false;
    double g = 1.0 / 256;             // EWMA_GAIN
    int64_t alphaIntervalPs = 1000000; // ALPHA_RESUME_INTERVAL (1 us)
    int64_t decreaseIntervalPs = 4000000; // RATE_DECREASE_INTERVAL (4 us)
    int64_t increaseIntervalPs = 300000000; // RP_TIMER (300 us)
    double aiBps = 0, haiBps = 0, minBps = 100e6;
    uint32_t fastRecoverySteps = 5;  // FAST_RECOVERY_TIMES
};

// Every flow of the scenario, its dependencies, and what the simulation measured.
class Replay
{
  public:
    // ---- inputs (set from Python before Begin)
    std::vector<uint32_t> src, dst, sqpn, dqpn;
    std::vector<uint16_t> sport;
    std::vector<uint64_t> bytes;
    std::vector<int64_t> fixedStartPs; // >= 0: start then (no dependencies); -1: after deps
    std::vector<int64_t> extraGapPs;   // wait after the line is ready (gap="analytic")
    std::vector<int64_t> relOffPs;     // earliest start after the op's release
    std::vector<int64_t> postPs;       // the op's local transfers that follow this line
    std::vector<uint32_t> opOf;        // line -> op index
    std::vector<uint32_t> depsLeft;    // predecessor lines (+1 for the op's release unless fixed)
    std::vector<uint32_t> depPtr, dependents; // CSR: lines waiting for line i
    std::vector<int64_t> edgeGapPs;    // per dependents entry: wait after line i ends
    // per op
    std::vector<int64_t> opGapPs, opTailPs;
    std::vector<uint32_t> opDepsLeft, opLinesLeft;
    std::vector<uint32_t> opDepPtr, opDependents;   // CSR: ops waiting for op o
    std::vector<uint32_t> opLinePtr, opLines;       // CSR: lines of op o
    int64_t t0Ps = 0;
    std::vector<ns3::Ptr<RoceNic>> nics;
    uint32_t pmtu = 4096;
    int64_t cnpIntervalPs = 4000000;
    Dcqcn dcqcn;

    // ---- outputs
    std::vector<int64_t> startPs, endPs, readyPs;
    std::vector<uint64_t> rxBytes;
    std::vector<uint32_t> rxPkts, cePkts, cnps, cnpsHeeded, psnErrors;
    uint32_t completed = 0;
    std::vector<int64_t> opReleasePs, opEndPs, opReadyPs, opDonePs;
    uint32_t opsCompleted = 0;

    void Resize(uint32_t n)
    {
        src.assign(n, 0);
        dst.assign(n, 0);
        sqpn.assign(n, 0);
        dqpn.assign(n, 0);
        sport.assign(n, 0);
        bytes.assign(n, 0);
        fixedStartPs.assign(n, -1);
        extraGapPs.assign(n, 0);
        relOffPs.assign(n, 0);
        postPs.assign(n, 0);
        opOf.assign(n, 0);
        depsLeft.assign(n, 0);
        depPtr.assign(n + 1, 0);
        startPs.assign(n, -1);
        endPs.assign(n, -1);
        readyPs.assign(n, 0);
        rxBytes.assign(n, 0);
        rxPkts.assign(n, 0);
        cePkts.assign(n, 0);
        cnps.assign(n, 0);
        cnpsHeeded.assign(n, 0);
        psnErrors.assign(n, 0);
    }

    void ResizeOps(uint32_t n)
    {
        opGapPs.assign(n, 0);
        opTailPs.assign(n, 0);
        opDepsLeft.assign(n, 0);
        opLinesLeft.assign(n, 0);
        opDepPtr.assign(n + 1, 0);
        opLinePtr.assign(n + 1, 0);
        opReleasePs.assign(n, -1);
        opEndPs.assign(n, -1);
        opReadyPs.assign(n, 0);
        opDonePs.assign(n, 0);
    }

    void SetFlow(uint32_t f, uint32_t s, uint32_t d, uint64_t b, uint16_t sp, uint32_t sq,
                 uint32_t dq)
    {
        src[f] = s;
        dst[f] = d;
        bytes[f] = b;
        sport[f] = sp;
        sqpn[f] = sq;
        dqpn[f] = dq;
    }

    // Bulk fills from numpy int64 buffers (cppyy passes them as pointers).
    static void FillI64(std::vector<int64_t>& v, const int64_t* p, size_t n)
    {
        v.assign(p, p + n);
    }

    static void FillU32(std::vector<uint32_t>& v, const int64_t* p, size_t n)
    {
        v.assign(p, p + n);
    }

    void Begin();
    void Start(uint32_t f);
    void Complete(uint32_t f);
    void Release(uint32_t o);
    void LineReady(uint32_t f);
    void CheckOp(uint32_t o);
    void OpComplete(uint32_t o);

  private:
    static ns3::Time At(int64_t ps)
    { // an absolute time as a delay from now (never negative)
        return ns3::PicoSeconds(std::max<int64_t>(ps - ns3::Simulator::Now().GetPicoSeconds(), 0));
    }

  public:

    // A flow is one RDMA WRITE message of PMTU-sized packets (k counts from 0 = the PSN).
    uint32_t Packets(uint32_t f) const
    {
        return bytes[f] == 0 ? 1 : uint32_t((bytes[f] + pmtu - 1) / pmtu);
    }

    uint32_t PayloadOf(uint32_t f, uint32_t k) const
    {
        uint64_t left = bytes[f] - uint64_t(k) * pmtu;
        return uint32_t(std::min<uint64_t>(left, pmtu));
    }

    uint32_t UdpPayloadBytes(uint32_t f, uint32_t k) const
    {
        uint32_t n = Packets(f), pay = PayloadOf(f, k);
        uint32_t ext = (k == 0 ? RETH_BYTES : 0) + (k == n - 1 ? IMM_BYTES : 0);
        return BTH_BYTES + ext + pay + ((4 - pay % 4) % 4) + ICRC_BYTES;
    }

    // FCT of flow f alone on its path: the packet-by-packet store-and-forward recurrence over
    // hops with (rate, delay, interframe gap), the same arithmetic the devices use.
    int64_t StandaloneFctPs(uint32_t f, const std::vector<uint64_t>& bps,
                            const std::vector<int64_t>& delayPs,
                            const std::vector<int64_t>& gapPs_) const
    {
        size_t hops = bps.size();
        std::vector<int64_t> free(hops, 0); // when hop h may start its next packet
        std::vector<ns3::DataRate> rate;
        for (uint64_t r : bps)
        {
            rate.emplace_back(r);
        }
        int64_t arrive = 0;
        uint32_t n = Packets(f);
        for (uint32_t k = 0; k < n; ++k)
        {
            uint32_t size = UdpPayloadBytes(f, k) + UDP_BYTES + IPV4_BYTES + PPP_BYTES;
            int64_t t = 0; // the NIC paces packet k after the previous one on the first hop
            for (size_t h = 0; h < hops; ++h)
            {
                int64_t tx = rate[h].CalculateBytesTxTime(size).GetPicoSeconds();
                int64_t s = std::max(t, free[h]);
                free[h] = s + tx + gapPs_[h];
                t = s + tx + delayPs[h];
            }
            arrive = t;
        }
        return arrive;
    }
};

class RoceNic : public ns3::Application
{
  public:
    static ns3::TypeId GetTypeId()
    {
        static ns3::TypeId tid = ns3::TypeId("tracegen::RoceNic")
                                     .SetParent<ns3::Application>()
                                     .SetGroupName("Applications")
                                     .AddConstructor<RoceNic>();
        return tid;
    }

    void Setup(Replay* replay, uint64_t lineBps, int64_t ifgPs)
    {
        m_replay = replay;
        m_rate = ns3::DataRate(lineBps);
        m_lineBps = double(lineBps);
        m_ifg = ns3::PicoSeconds(ifgPs);
    }

    // Requester: flow f becomes an active QP of this NIC.
    void StartFlow(uint32_t f)
    {
        TxQp q;
        q.flow = f;
        q.rateBps = q.targetBps = m_lineBps;
        q.lastAlphaPs = q.lastIncreasePs = ns3::Simulator::Now().GetPicoSeconds(); // alpha = 1
        m_txq[m_replay->sqpn[f]] = m_active.size();
        m_active.push_back(q);
        if (!m_sendEvent.IsPending())
        {
            SendNext();
        }
        else if (ns3::Simulator::Now().GetPicoSeconds() >= m_wireFreePs)
        { // the wire is idle, we were only waiting for a DCQCN-paced QP: the new one may go now
            ns3::Simulator::Cancel(m_sendEvent);
            SendNext();
        }
    }

    // Responder: expect flow f on our QP dqpn.
    void ExpectFlow(uint32_t f)
    {
        RxQp r;
        r.flow = f;
        m_rxq[m_replay->dqpn[f]] = r;
    }

  private:
    struct TxQp
    {
        uint32_t flow;
        uint32_t psn = 0;    // = packets sent
        int64_t nextPs = 0;  // DCQCN pacing: earliest next packet
        double rateBps, targetBps, alpha = 1.0;
        int64_t lastCnpPs = -1, lastCutPs = -1, lastAlphaPs = 0, lastIncreasePs = 0;
        uint32_t increaseSteps = 0;
    };

    struct RxQp
    {
        uint32_t flow;
        uint32_t epsn = 0;
        int64_t lastCnpPs = -1;
    };

    void StartApplication() override
    {
        m_ipv4 = GetNode()->GetObject<ns3::Ipv4L3Protocol>();
        m_addr = m_ipv4->GetAddress(1, 0).GetLocal();
        m_sock = ns3::Socket::CreateSocket(GetNode(), ns3::UdpSocketFactory::GetTypeId());
        m_sock->Bind(ns3::InetSocketAddress(ns3::Ipv4Address::GetAny(), ROCE_PORT));
        m_sock->SetIpRecvTos(true);
        m_sock->SetRecvCallback(ns3::MakeCallback(&RoceNic::OnRecv, this));
    }

    void StopApplication() override
    {
        if (m_sock)
        {
            m_sock->Close();
        }
        ns3::Simulator::Cancel(m_sendEvent);
    }

    static void Put24(uint8_t* b, uint32_t v)
    {
        b[0] = (v >> 16) & 0xFF;
        b[1] = (v >> 8) & 0xFF;
        b[2] = v & 0xFF;
    }

    static uint32_t Get24(const uint8_t* b)
    {
        return (uint32_t(b[0]) << 16) | (uint32_t(b[1]) << 8) | b[2];
    }

    void Emit(ns3::Ptr<ns3::Packet> p, ns3::Ipv4Address dst, uint16_t sport, uint8_t tos)
    {
        ns3::UdpHeader udp; // checksum stays 0: ns-3 leaves UDP checksums off by default
        udp.SetSourcePort(sport);
        udp.SetDestinationPort(ROCE_PORT);
        p->AddHeader(udp);
        ns3::SocketIpTosTag tag;
        tag.SetTos(tos);
        p->AddPacketTag(tag);
        m_ipv4->Send(p, m_addr, dst, 17, nullptr);
    }

    static ns3::Ipv4Address HostAddress(uint32_t host)
    {
        return ns3::Ipv4Address(0x0B000001u + (host / 256) * 0x10000u + (host % 256) * 0x100u);
    }

    // Round robin: the next active QP (from m_rr on) allowed to send now.
    void SendNext()
    {
        int64_t now = ns3::Simulator::Now().GetPicoSeconds();
        size_t n = m_active.size();
        if (n == 0)
        {
            return;
        }
        int64_t soonest = INT64_MAX;
        for (size_t i = 0; i < n; ++i)
        {
            size_t j = (m_rr + i) % n;
            if (m_active[j].nextPs <= now)
            {
                SendPacket(j, now);
                return;
            }
            soonest = std::min(soonest, m_active[j].nextPs);
        }
        m_sendEvent =
            ns3::Simulator::Schedule(ns3::PicoSeconds(soonest - now), &RoceNic::SendNext, this);
    }

    void SendPacket(size_t j, int64_t now)
    {
        Replay& R = *m_replay;
        TxQp& q = m_active[j];
        uint32_t f = q.flow, k = q.psn, n = R.Packets(f);
        uint32_t pay = R.PayloadOf(f, k), pad = (4 - pay % 4) % 4;
        bool first = k == 0, last = k == n - 1;
        uint8_t h[BTH_BYTES + RETH_BYTES + IMM_BYTES] = {0};
        h[0] = first ? (last ? OP_WRITE_ONLY_IMM : OP_WRITE_FIRST)
                     : (last ? OP_WRITE_LAST_IMM : OP_WRITE_MIDDLE);
        h[1] = uint8_t(pad << 4);
        h[2] = h[3] = 0xFF; // P_Key
        Put24(h + 5, R.dqpn[f]);
        h[8] = last ? 0x80 : 0; // A: ask for an ACK on the last packet
        Put24(h + 9, k & 0xFFFFFF);
        uint32_t len = BTH_BYTES;
        if (first)
        { // RETH: VA 0, R_Key = flow index, DMA length = message size
            uint32_t rkey = f, dma = uint32_t(R.bytes[f]);
            for (int i = 0; i < 4; ++i)
            {
                h[len + 8 + i] = (rkey >> (24 - 8 * i)) & 0xFF;
                h[len + 12 + i] = (dma >> (24 - 8 * i)) & 0xFF;
            }
            len += RETH_BYTES;
        }
        if (last)
        { // ImmDt: NCCL puts the message size here
            uint32_t imm = uint32_t(R.bytes[f]);
            for (int i = 0; i < 4; ++i)
            {
                h[len + i] = (imm >> (24 - 8 * i)) & 0xFF;
            }
            len += IMM_BYTES;
        }
        ns3::Ptr<ns3::Packet> p = ns3::Create<ns3::Packet>(h, len);
        p->AddPaddingAtEnd(pay + pad + ICRC_BYTES);
        uint32_t size = p->GetSize() + UDP_BYTES + IPV4_BYTES + PPP_BYTES;
        Emit(p, HostAddress(R.dst[f]), R.sport[f], 0x6A);

        ns3::Time wire = m_rate.CalculateBytesTxTime(size) + m_ifg;
        m_wireFreePs = now + wire.GetPicoSeconds();
        if (R.dcqcn.enabled)
        {
            Increase(q, now);
            q.nextPs = now + int64_t(std::ceil(double(size + IfgBytes()) * 8e12 / q.rateBps));
        }
        q.psn++;
        if (last)
        {
            m_txq.erase(R.sqpn[f]);
            m_active.erase(m_active.begin() + j);
            for (size_t i = j; i < m_active.size(); ++i)
            {
                m_txq[R.sqpn[m_active[i].flow]] = i;
            }
            m_rr = m_active.empty() ? 0 : j % m_active.size();
        }
        else
        {
            m_rr = j + 1;
        }
        m_sendEvent = ns3::Simulator::Schedule(wire, &RoceNic::SendNext, this);
    }

    double IfgBytes() const
    {
        return m_ifg.GetPicoSeconds() * m_lineBps / 8e12;
    }

    void OnRecv(ns3::Ptr<ns3::Socket> sock)
    {
        ns3::Address from;
        while (ns3::Ptr<ns3::Packet> p = sock->RecvFrom(from))
        {
            uint8_t b[BTH_BYTES];
            p->CopyData(b, BTH_BYTES);
            ns3::SocketIpTosTag tos;
            bool ce = p->RemovePacketTag(tos) && (tos.GetTos() & 3) == 3;
            uint8_t op = b[0];
            uint32_t qpn = Get24(b + 5);
            if (op == OP_ACK)
            {
                continue; // completion is counted at the responder: nothing to do
            }
            if (op == OP_CNP)
            {
                OnCnp(qpn);
                continue;
            }
            auto it = m_rxq.find(qpn);
            if (it == m_rxq.end())
            {
                continue;
            }
            RxQp& r = it->second;
            Replay& R = *m_replay;
            uint32_t f = r.flow, psn = Get24(b + 9);
            bool ackReq = b[8] & 0x80; // the A bit: last packet of the message
            if (psn != r.epsn)
            {
                R.psnErrors[f]++;
            }
            r.epsn = psn + 1;
            R.rxPkts[f]++;
            R.rxBytes[f] += R.PayloadOf(f, psn);
            int64_t now = ns3::Simulator::Now().GetPicoSeconds();
            uint16_t sport = ns3::InetSocketAddress::ConvertFrom(from).GetPort();
            ns3::Ipv4Address peer = ns3::InetSocketAddress::ConvertFrom(from).GetIpv4();
            if (ce)
            {
                R.cePkts[f]++;
                if (r.lastCnpPs < 0 || now - r.lastCnpPs >= R.cnpIntervalPs)
                {
                    r.lastCnpPs = now;
                    R.cnps[f]++;
                    SendCnp(peer, R.sqpn[f]);
                }
            }
            if (ackReq)
            {
                SendAck(peer, sport, R.sqpn[f], psn);
                if (R.rxBytes[f] == R.bytes[f])
                {
                    R.Complete(f);
                }
            }
        }
    }

    void SendAck(ns3::Ipv4Address peer, uint16_t sport, uint32_t rqpn, uint32_t psn)
    {
        uint8_t h[BTH_BYTES + AETH_BYTES] = {0};
        h[0] = OP_ACK;
        h[2] = h[3] = 0xFF;
        Put24(h + 5, rqpn);
        Put24(h + 9, psn);
        h[12] = 0x1F; // AETH syndrome: ACK, credits invalid; MSN 1 (one message per QP)
        Put24(h + 13, 1);
        ns3::Ptr<ns3::Packet> p = ns3::Create<ns3::Packet>(h, sizeof h);
        p->AddPaddingAtEnd(ICRC_BYTES);
        Emit(p, peer, sport, 0x6A);
    }

    void SendCnp(ns3::Ipv4Address peer, uint32_t rqpn)
    {
        uint8_t h[BTH_BYTES] = {0};
        h[0] = OP_CNP;
        h[2] = h[3] = 0xFF;
        h[4] = 0x40; // BECN
        Put24(h + 5, rqpn);
        ns3::Ptr<ns3::Packet> p = ns3::Create<ns3::Packet>(h, sizeof h);
        p->AddPaddingAtEnd(16 + ICRC_BYTES);
        // Real NICs send CNPs from UDP port 0; ns-3 forbids it, and ECMP here keys on the port:
        // 4791 keeps every CNP of a host pair on one path.
        Emit(p, peer, ROCE_PORT, 0xC2);
    }

    // ---- DCQCN reaction point, evaluated lazily (no per-QP timers).
    void DecayAlpha(TxQp& q, int64_t now)
    {
        const Dcqcn& D = m_replay->dcqcn;
        int64_t periods = (now - q.lastAlphaPs) / D.alphaIntervalPs;
        if (periods > 0)
        {
            q.alpha *= std::pow(1 - D.g, double(periods));
            q.lastAlphaPs += periods * D.alphaIntervalPs;
        }
    }

    void OnCnp(uint32_t qpn)
    {
        Replay& R = *m_replay;
        auto it = m_txq.find(qpn);
        if (it == m_txq.end() || !R.dcqcn.enabled)
        {
            return;
        }
        TxQp& q = m_active[it->second];
        R.cnpsHeeded[q.flow]++;
        const Dcqcn& D = R.dcqcn;
        int64_t now = ns3::Simulator::Now().GetPicoSeconds();
        DecayAlpha(q, now);
        q.alpha = (1 - D.g) * q.alpha + D.g;
        q.lastCnpPs = now;
        if (q.lastCutPs >= 0 && now - q.lastCutPs < D.decreaseIntervalPs)
        {
            return; // at most one cut per rate-decrease interval
        }
        q.lastCutPs = now;
        q.targetBps = q.rateBps;
        q.rateBps = std::max(D.minBps, q.rateBps * (1 - q.alpha / 2));
        q.increaseSteps = 0;
        q.lastIncreasePs = now;
    }

    // Rate recovery: every RP_TIMER period without a cut, fast recovery halves the gap to the
    // target for `fastRecoverySteps` periods, then additive (AI) and hyper (HAI) increase.
    void Increase(TxQp& q, int64_t now)
    {
        const Dcqcn& D = m_replay->dcqcn;
        DecayAlpha(q, now);
        while (q.rateBps < m_lineBps && now - q.lastIncreasePs >= D.increaseIntervalPs)
        {
            q.lastIncreasePs += D.increaseIntervalPs;
            q.increaseSteps++;
            if (q.increaseSteps > D.fastRecoverySteps)
            {
                bool hyper = q.increaseSteps > 2 * D.fastRecoverySteps;
                q.targetBps = std::min(m_lineBps, q.targetBps + (hyper ? D.haiBps : D.aiBps));
            }
            q.rateBps = std::min(m_lineBps, (q.rateBps + q.targetBps) / 2);
        }
    }

    Replay* m_replay = nullptr;
    ns3::DataRate m_rate;
    double m_lineBps = 0;
    ns3::Time m_ifg;
    ns3::Ptr<ns3::Ipv4L3Protocol> m_ipv4;
    ns3::Ipv4Address m_addr;
    ns3::Ptr<ns3::Socket> m_sock;
    std::vector<TxQp> m_active;
    std::unordered_map<uint32_t, size_t> m_txq; // requester QPN -> index in m_active
    std::unordered_map<uint32_t, RxQp> m_rxq;   // responder QPN -> state
    size_t m_rr = 0;
    ns3::EventId m_sendEvent;
    int64_t m_wireFreePs = 0;
};

inline void Replay::Begin()
{
    for (uint32_t f = 0; f < src.size(); ++f)
    {
        nics[dst[f]]->ExpectFlow(f);
        if (fixedStartPs[f] >= 0)
        {
            ns3::Simulator::Schedule(At(fixedStartPs[f]), &Replay::Start, this, f);
        }
    }
    for (uint32_t o = 0; o < opGapPs.size(); ++o)
    {
        opReadyPs[o] = t0Ps;
        if (opDepsLeft[o] == 0)
        {
            ns3::Simulator::Schedule(At(t0Ps + opGapPs[o]), &Replay::Release, this, o);
        }
    }
}

inline void Replay::Release(uint32_t o)
{
    int64_t now = ns3::Simulator::Now().GetPicoSeconds();
    opReleasePs[o] = now;
    opDonePs[o] = std::max(opDonePs[o], now + opTailPs[o]);
    for (uint32_t i = opLinePtr[o]; i < opLinePtr[o + 1]; ++i)
    {
        uint32_t f = opLines[i];
        if (fixedStartPs[f] < 0)
        {
            readyPs[f] = std::max(readyPs[f], now + relOffPs[f]);
            LineReady(f);
        }
    }
    CheckOp(o);
}

inline void Replay::LineReady(uint32_t f)
{
    if (--depsLeft[f] == 0)
    {
        ns3::Simulator::Schedule(At(readyPs[f] + extraGapPs[f]), &Replay::Start, this, f);
    }
}

inline void Replay::CheckOp(uint32_t o)
{
    if (opReleasePs[o] >= 0 && opLinesLeft[o] == 0)
    {
        ns3::Simulator::Schedule(At(opDonePs[o]), &Replay::OpComplete, this, o);
    }
}

inline void Replay::OpComplete(uint32_t o)
{
    int64_t now = ns3::Simulator::Now().GetPicoSeconds();
    opEndPs[o] = now;
    opsCompleted++;
    for (uint32_t i = opDepPtr[o]; i < opDepPtr[o + 1]; ++i)
    {
        uint32_t p = opDependents[i];
        opReadyPs[p] = std::max(opReadyPs[p], now);
        if (--opDepsLeft[p] == 0)
        {
            ns3::Simulator::Schedule(At(opReadyPs[p] + opGapPs[p]), &Replay::Release, this, p);
        }
    }
}

inline void Replay::Start(uint32_t f)
{
    startPs[f] = ns3::Simulator::Now().GetPicoSeconds();
    nics[src[f]]->StartFlow(f);
}

inline void Replay::Complete(uint32_t f)
{
    int64_t now = ns3::Simulator::Now().GetPicoSeconds();
    endPs[f] = now;
    completed++;
    for (uint32_t i = depPtr[f]; i < depPtr[f + 1]; ++i)
    {
        uint32_t d = dependents[i];
        readyPs[d] = std::max(readyPs[d], now + edgeGapPs[i]);
        LineReady(d);
    }
    uint32_t o = opOf[f];
    opDonePs[o] = std::max(opDonePs[o], now + postPs[f]);
    --opLinesLeft[o];
    CheckOp(o);
}

} // namespace tracegen
