// A RoCE-like NIC for mainline ns-3 (which has no RDMA module), plus the dependency-aware replay
// that drives it. Loaded at run time with cppyy.cppdef after roce_switch.h, capture.h and
// dcqcn.h; all per-packet and per-event work stays in C++ (Python only fills the tables before
// the run and reads the results after it).
//
// Replay (an event-driven DAG of CommOps and flow.txt lines; inputs.py derives the tables):
//   - op o is released at max(simulated completion of its dep ops) + gap(o); an op without deps
//     at t0 + gap(o) (its analytic release).
//   - line k is posted at max(release(op) + relOff(k), max over predecessor lines j of
//     end(j) + edgeGap(j, k)) + extraGap(k); a line whose op has no deps and which has no
//     transfer deps is posted at its flow.txt time instead (fixedStartPs >= 0).
//   - op o completes once released and all its lines have completed, at
//     max(release + tail(o), max over its lines k of end(k) + post(k)); an op without lines
//     (NVLink-only, markers) at release + tail(o).
//
// QPs: every line is one RDMA WRITE-with-immediate message posted to its connection's RC QP
// (`qpOf`); a QP sends its messages in posting order, PSNs run on across messages (24 bits), and
// its DCQCN rate state lives as long as the QP (the whole run), so a CNP slows the messages that
// follow - unless Dcqcn::perMessage, which restarts it when a message's first packet leaves. Wire format: RoCEv2 on UDP 4791 (source port = the QP's), WRITE First 0x06
// (BTH+RETH) / Middle 0x07 / Last-Imm 0x09 (BTH+ImmDt), or Only-Imm 0x0B; A bit on the last
// packet; payload zero bytes padded to 4 B (PadCnt); 4 B ICRC left zero (nothing here checks
// it, tshark does not verify it). RETH R_Key = the line index (how the responder tells
// messages apart). The responder ACKs every message's last packet (0x11 + AETH) and answers
// CE-marked packets with at most one CNP per QP per `cnpIntervalPs` (0x81, BECN, DestQP = the
// requester's QP). Data and ACK IP ToS 0x6A (DSCP 26, ECT(0)); CNP ToS 0xC2 (DSCP 48).
//
// Send scheduler (one packet at a time at line rate; the next leaves when the current one and
// the interframe gap are done, so the host queue stays empty). Which QP sends next, among those
// with pending messages that neither DCQCN's rate nor a PFC PAUSE holds back:
//   arbitration 0, "fifo":   the QP whose head message was posted first (ties: lower line): one
//                            message after the other per NIC, as tracegen's list schedule
//                            serialises a NIC's transfers;
//   arbitration 1, "rr":     packet round robin over the QPs: the active QPs share the NIC
//                            fairly, as a fluid max-min fair schedule assumes.
//
// DCQCN reaction point per QP: dcqcn.h (its state lives in QpState::rp). A CNP carries the line
// of the CE-marked packet it answers (an ns-3 FlowIdTag: simulation metadata, not on the wire),
// so that with per-message state a CNP for an earlier message of the QP is not heeded.
#pragma once

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <set>
#include <tuple>
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
const uint32_t ETH_FRAME_BYTES = 14 + 4 + 4; // MAC + 802.1Q + FCS around the IP packet

// Per-QP state (index = QP id; both ends of the connection).
struct QpState
{
    std::deque<uint32_t> lines; // posted, not yet fully sent
    uint32_t pkt = 0;           // next packet of the head line
    uint32_t psn = 0;           // next PSN to send
    uint32_t epsn = 0;          // responder: next PSN expected
    uint32_t rxLine = 0;        // responder: the message being received
    int64_t lastCnpPs = -1;     // responder: last CNP sent
    bool active = false;        // in its NIC's active list
    DcqcnRp rp;                 // requester: DCQCN rate state (dcqcn.h)
    bool rpStarted = false;     // rp set to line rate (the QP's first message)
    int64_t nextPs = 0;         // pacing: earliest next packet
    ns3::EventId decreaseEvt, rpTimer;
};

// Every flow of the scenario, its dependencies, and what the simulation measured.
class Replay
{
  public:
    // ---- inputs (set from Python before Begin)
    std::vector<uint32_t> src, dst, qpOf;
    std::vector<uint64_t> bytes;
    std::vector<int64_t> fixedStartPs; // >= 0: start then (no dependencies); -1: after deps
    std::vector<int64_t> extraGapPs;   // wait after the line is ready (gap="analytic")
    std::vector<int64_t> relOffPs;     // earliest start after the op's release
    std::vector<int64_t> postPs;       // the op's local transfers that follow this line
    std::vector<uint32_t> opOf;        // line -> op index
    std::vector<uint32_t> depsLeft;    // predecessor lines (+1 for the op's release unless fixed)
    std::vector<uint32_t> depPtr, dependents; // CSR: lines waiting for line i
    std::vector<int64_t> edgeGapPs;    // per dependents entry: wait after line i ends
    // per QP
    std::vector<uint32_t> qpSrc, qpDst, qpSqpn, qpDqpn;
    std::vector<uint16_t> qpSport;
    std::vector<QpState> qps;
    // per op
    std::vector<int64_t> opGapPs, opTailPs;
    std::vector<uint32_t> opDepsLeft, opLinesLeft;
    std::vector<uint32_t> opDepPtr, opDependents;   // CSR: ops waiting for op o
    std::vector<uint32_t> opLinePtr, opLines;       // CSR: lines of op o
    int64_t t0Ps = 0;
    std::vector<ns3::Ptr<RoceNic>> nics;
    uint32_t pmtu = 4096;
    int64_t cnpIntervalPs = 4000000;
    uint32_t arbitration = 0; // 0 fifo, 1 rr
    Dcqcn dcqcn;

    // ---- outputs
    std::vector<int64_t> startPs, endPs, readyPs, txStartPs;
    std::vector<uint64_t> rxBytes;
    std::vector<uint32_t> rxPkts, cePkts, cnps, cnpsHeeded, psnErrors;
    uint32_t completed = 0;
    std::vector<int64_t> opReleasePs, opEndPs, opReadyPs, opDonePs;
    uint32_t opsCompleted = 0;
    uint64_t cnpsIgnored = 0, rateCuts = 0;
    double minRateSeenBps = 0;

    void Resize(uint32_t n)
    {
        src.assign(n, 0);
        dst.assign(n, 0);
        qpOf.assign(n, 0);
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
        txStartPs.assign(n, -1);
        rxBytes.assign(n, 0);
        rxPkts.assign(n, 0);
        cePkts.assign(n, 0);
        cnps.assign(n, 0);
        cnpsHeeded.assign(n, 0);
        psnErrors.assign(n, 0);
    }

    void ResizeQps(uint32_t n)
    {
        qpSrc.assign(n, 0);
        qpDst.assign(n, 0);
        qpSqpn.assign(n, 0);
        qpDqpn.assign(n, 0);
        qpSport.assign(n, 0);
        qps.assign(n, QpState());
    }

    void SetQp(uint32_t q, uint32_t s, uint32_t d, uint32_t sq, uint32_t dq, uint16_t sport)
    {
        qpSrc[q] = s;
        qpDst[q] = d;
        qpSqpn[q] = sq;
        qpDqpn[q] = dq;
        qpSport[q] = sport;
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

    // Bulk fills from numpy int64 buffers (cppyy passes them as pointers).
    static void FillI64(std::vector<int64_t>& v, const int64_t* p, size_t n)
    {
        v.assign(p, p + n);
    }

    static void FillU64(std::vector<uint64_t>& v, const int64_t* p, size_t n)
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

    // A flow is one RDMA WRITE message of PMTU-sized packets (k counts from 0).
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

class RoceNic : public ns3::Application, public PauseTarget
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

    void SetCapture(HostCapture* cap)
    {
        m_cap = cap;
    }

    // Requester: line f is posted to its QP's send queue.
    void Post(uint32_t f)
    {
        Replay& R = *m_replay;
        uint32_t q = R.qpOf[f];
        QpState& s = R.qps[q];
        if (!s.rpStarted)
        {
            s.rp.Reset(m_lineBps);
            s.rpStarted = true;
        }
        s.lines.push_back(f);
        if (!s.active)
        {
            s.active = true;
            m_active.push_back(q);
            m_fifo.emplace(R.startPs[f], f, q);
        }
        Kick();
    }

    // PFC PAUSE for the data priority from the switch this NIC hangs off.
    void OnPause(int64_t durPs) override
    {
        int64_t now = ns3::Simulator::Now().GetPicoSeconds();
        if (m_cap)
        {
            m_cap->Pfc(durPs > 0 ? 0xFFFF : 0);
        }
        if (durPs > 0)
        {
            pausesRx++;
            if (m_pausedUntilPs <= now)
            {
                m_pausedAt = now;
            }
            m_pausedUntilPs = now + durPs;
            ns3::Simulator::Cancel(m_unpause);
            m_unpause = ns3::Simulator::Schedule(ns3::PicoSeconds(durPs), &RoceNic::Unpause, this);
        }
        else if (m_pausedUntilPs > now)
        {
            ns3::Simulator::Cancel(m_unpause);
            Unpause();
        }
    }

    // ---- results
    uint32_t pausesRx = 0;
    int64_t pausedPs = 0;
    uint64_t txBytes = 0, txPkts = 0;

  private:
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

    void Unpause()
    {
        int64_t now = ns3::Simulator::Now().GetPicoSeconds();
        pausedPs += now - m_pausedAt;
        m_pausedUntilPs = now;
        Kick();
    }

    // Send now if the wire is idle and no send is pending (a pending one may only be waiting for
    // a paced QP: the new work may go at once).
    void Kick()
    {
        int64_t now = ns3::Simulator::Now().GetPicoSeconds();
        if (!m_sendEvent.IsPending())
        {
            SendNext();
        }
        else if (now >= m_wireFreePs)
        {
            ns3::Simulator::Cancel(m_sendEvent);
            SendNext();
        }
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

    // Headers, then the payload as zero bytes (Create<Packet>(n) is a zero area: deterministic).
    static ns3::Ptr<ns3::Packet> Make(const uint8_t* h, uint32_t len, uint32_t zeros)
    {
        ns3::Ptr<ns3::Packet> p = ns3::Create<ns3::Packet>(h, len);
        if (zeros)
        {
            p->AddAtEnd(ns3::Create<ns3::Packet>(zeros));
        }
        return p;
    }

    // The next QP to send a packet (see the header); schedules a retry when all are held back.
    // fifo: the active QPs ordered by (head message posted, line) in m_fifo; rr: m_active from
    // m_rr on.
    void SendNext()
    {
        Replay& R = *m_replay;
        int64_t now = ns3::Simulator::Now().GetPicoSeconds();
        size_t n = m_active.size();
        if (n == 0 || m_pausedUntilPs > now)
        {
            return; // new work or the end of the pause calls Kick()
        }
        int64_t soonest = INT64_MAX;
        if (R.arbitration == 1)
        {
            for (size_t i = 0; i < n; ++i)
            {
                size_t j = (m_rr + i) % n;
                QpState& s = R.qps[m_active[j]];
                if (s.nextPs <= now)
                {
                    SendPacket(m_active[j], j, now);
                    return;
                }
                soonest = std::min(soonest, s.nextPs);
            }
        }
        else
        {
            for (const auto& e : m_fifo)
            {
                uint32_t q = std::get<2>(e);
                QpState& s = R.qps[q];
                if (s.nextPs <= now)
                {
                    SendPacket(q, n, now);
                    return;
                }
                soonest = std::min(soonest, s.nextPs);
            }
        }
        m_sendEvent =
            ns3::Simulator::Schedule(ns3::PicoSeconds(soonest - now), &RoceNic::SendNext, this);
    }

    // Packet `pkt` of QP q's head message; j: q's index in m_active if known (rr), else n.
    void SendPacket(uint32_t q, size_t j, int64_t now)
    {
        Replay& R = *m_replay;
        QpState& s = R.qps[q];
        uint32_t f = s.lines.front(), k = s.pkt, n = R.Packets(f);
        uint32_t pay = R.PayloadOf(f, k), pad = (4 - pay % 4) % 4;
        bool first = k == 0, last = k == n - 1;
        if (first)
        {
            R.txStartPs[f] = now;
            if (R.dcqcn.enabled && R.dcqcn.perMessage)
            { // HPCC / SimAI: a new flow is a new QP at line rate
                ResetRp(s);
            }
        }
        uint8_t h[BTH_BYTES + RETH_BYTES + IMM_BYTES] = {0};
        h[0] = first ? (last ? OP_WRITE_ONLY_IMM : OP_WRITE_FIRST)
                     : (last ? OP_WRITE_LAST_IMM : OP_WRITE_MIDDLE);
        h[1] = uint8_t(pad << 4);
        h[2] = h[3] = 0xFF; // P_Key
        Put24(h + 5, R.qpDqpn[q]);
        h[8] = last ? 0x80 : 0; // A: ask for an ACK on the last packet
        Put24(h + 9, s.psn & 0xFFFFFF);
        uint32_t len = BTH_BYTES;
        if (first)
        { // RETH: VA 0, R_Key = line index, DMA length = message size
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
        ns3::Ptr<ns3::Packet> p = Make(h, len, pay + pad + ICRC_BYTES);
        uint32_t size = p->GetSize() + UDP_BYTES + IPV4_BYTES + PPP_BYTES;
        p->AddPacketTag(ns3::FlowIdTag(f)); // its message (metadata, not on the wire): see OnRecv
        Emit(p, HostAddress(R.qpDst[q]), R.qpSport[q], 0x6A);
        txBytes += size;
        txPkts++;

        ns3::Time wire = m_rate.CalculateBytesTxTime(size) + m_ifg;
        m_wireFreePs = now + wire.GetPicoSeconds();
        // DCQCN: the packet's bytes count towards the byte counter (an increase event may raise
        // the rate at once), then the QP's next packet waits for its rate
        if (R.dcqcn.enabled && s.rp.OnSent(R.dcqcn, m_lineBps, size - PPP_BYTES + ETH_FRAME_BYTES) &&
            s.rp.AtLine(m_lineBps))
        {
            ns3::Simulator::Cancel(s.rpTimer); // recovered: the timer has nothing left to do
        }
        s.nextPs = R.dcqcn.enabled && s.rp.rateBps < m_lineBps
                       ? now + int64_t(std::ceil(double(size + IfgBytes()) * 8e12 / s.rp.rateBps))
                       : 0;
        s.psn++;
        s.pkt++;
        if (last)
        {
            m_fifo.erase(std::make_tuple(R.startPs[f], f, q));
            s.lines.pop_front();
            s.pkt = 0;
            if (!s.lines.empty())
            {
                uint32_t g = s.lines.front();
                m_fifo.emplace(R.startPs[g], g, q);
            }
        }
        if (s.lines.empty())
        {
            if (j >= m_active.size()) // fifo: find it (only when the QP goes idle)
            {
                j = std::find(m_active.begin(), m_active.end(), q) - m_active.begin();
            }
            s.active = false;
            m_active.erase(m_active.begin() + j);
            m_rr = m_active.empty() ? 0 : j % m_active.size();
        }
        else if (j < m_active.size())
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
        Replay& R = *m_replay;
        while (ns3::Ptr<ns3::Packet> p = sock->RecvFrom(from))
        {
            uint8_t b[BTH_BYTES + RETH_BYTES];
            p->CopyData(b, sizeof b);
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
                ns3::FlowIdTag tag;
                OnCnp(qpn, p->PeekPacketTag(tag) ? tag.GetFlowId() : UINT32_MAX);
                continue;
            }
            auto it = m_rxq.find(qpn);
            if (it == m_rxq.end())
            {
                continue;
            }
            uint32_t q = it->second;
            QpState& s = R.qps[q];
            uint32_t psn = Get24(b + 9);
            if (op == OP_WRITE_FIRST || op == OP_WRITE_ONLY_IMM)
            { // R_Key names the line (message) this and the following packets belong to
                s.rxLine = (uint32_t(b[BTH_BYTES + 8]) << 24) | (uint32_t(b[BTH_BYTES + 9]) << 16) |
                           (uint32_t(b[BTH_BYTES + 10]) << 8) | b[BTH_BYTES + 11];
            }
            uint32_t f = s.rxLine;
            ns3::FlowIdTag line;
            if (p->PeekPacketTag(line))
            { // a link event moves a QP to another path mid-message (scenario link_events): its
              // packets may then arrive out of order, and each still counts for its own message
                f = line.GetFlowId();
            }
            bool ackReq = b[8] & 0x80; // the A bit: last packet of the message
            if (psn != (s.epsn & 0xFFFFFF))
            {
                R.psnErrors[f]++;
            }
            s.epsn = psn + 1;
            uint32_t k = R.rxPkts[f]++;
            R.rxBytes[f] += R.PayloadOf(f, k);
            int64_t now = ns3::Simulator::Now().GetPicoSeconds();
            uint16_t sport = ns3::InetSocketAddress::ConvertFrom(from).GetPort();
            ns3::Ipv4Address peer = ns3::InetSocketAddress::ConvertFrom(from).GetIpv4();
            if (ce)
            {
                R.cePkts[f]++;
                if (s.lastCnpPs < 0 || now - s.lastCnpPs >= R.cnpIntervalPs)
                {
                    s.lastCnpPs = now;
                    R.cnps[f]++;
                    SendCnp(peer, R.qpSqpn[q], f);
                }
            }
            if (ackReq)
            {
                SendAck(peer, sport, R.qpSqpn[q], psn);
            }
            if (R.rxBytes[f] == R.bytes[f]) // every packet in: in order, with the last one
            {
                R.Complete(f);
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
        h[12] = 0x1F; // AETH syndrome: ACK, credits invalid; MSN: messages acknowledged so far
        Put24(h + 13, ++m_msn[rqpn]);
        Emit(Make(h, sizeof h, ICRC_BYTES), peer, sport, 0x6A);
    }

    void SendCnp(ns3::Ipv4Address peer, uint32_t rqpn, uint32_t line)
    {
        uint8_t h[BTH_BYTES] = {0};
        h[0] = OP_CNP;
        h[2] = h[3] = 0xFF;
        h[4] = 0x40; // BECN
        Put24(h + 5, rqpn);
        // Real NICs send CNPs from UDP port 0; ns-3 forbids it, and ECMP here keys on the port:
        // 4791 keeps every CNP of a host pair on one path.
        ns3::Ptr<ns3::Packet> p = Make(h, sizeof h, 16 + ICRC_BYTES);
        p->AddPacketTag(ns3::FlowIdTag(line)); // the message it answers (metadata, not on the wire)
        Emit(p, peer, ROCE_PORT, 0xC2);
    }

  public:
    // Responder side: our QPN -> QP id (set before the run).
    void ExpectQp(uint32_t qpn, uint32_t q)
    {
        m_rxq[qpn] = q;
    }

    // Requester side: our QPN -> QP id.
    void OwnQp(uint32_t qpn, uint32_t q)
    {
        m_txq[qpn] = q;
    }

  private:
    // ---- DCQCN reaction point (dcqcn.h); the events it asks for
    void ResetRp(QpState& s)
    {
        ns3::Simulator::Cancel(s.decreaseEvt);
        ns3::Simulator::Cancel(s.rpTimer);
        s.rp.Reset(m_lineBps);
        s.nextPs = 0;
    }

    // A CNP for QP `qpn` answering a packet of `line`.
    void OnCnp(uint32_t qpn, uint32_t line)
    {
        Replay& R = *m_replay;
        auto it = m_txq.find(qpn);
        if (it == m_txq.end())
        {
            return;
        }
        uint32_t q = it->second;
        QpState& s = R.qps[q];
        bool current = !s.lines.empty() && s.lines.front() == line;
        if (!R.dcqcn.enabled || (R.dcqcn.perMessage && !current) || line >= R.src.size())
        { // off, or (per-message state) it answers a message whose QP state is gone
            R.cnpsIgnored++;
            return;
        }
        R.cnpsHeeded[line]++;
        int64_t now = ns3::Simulator::Now().GetPicoSeconds();
        int64_t at = s.rp.OnCnp(R.dcqcn, now);
        if (!s.decreaseEvt.IsPending())
        {
            s.decreaseEvt = ns3::Simulator::Schedule(ns3::PicoSeconds(at - now),
                                                     &RoceNic::CheckDecrease, this, q);
        }
    }

    void CheckDecrease(uint32_t q)
    {
        Replay& R = *m_replay;
        QpState& s = R.qps[q];
        if (!s.rp.Decrease(R.dcqcn, ns3::Simulator::Now().GetPicoSeconds()))
        {
            return;
        }
        R.rateCuts++;
        R.minRateSeenBps = R.minRateSeenBps == 0 ? s.rp.rateBps : std::min(R.minRateSeenBps, s.rp.rateBps);
        ns3::Simulator::Cancel(s.rpTimer);
        s.rpTimer = ns3::Simulator::Schedule(ns3::PicoSeconds(R.dcqcn.increaseIntervalPs),
                                             &RoceNic::RateIncrease, this, q);
    }

    void RateIncrease(uint32_t q)
    {
        Replay& R = *m_replay;
        QpState& s = R.qps[q];
        s.rp.Increase(R.dcqcn, m_lineBps, true);
        if (s.rp.AtLine(m_lineBps))
        {
            s.nextPs = 0;      // recovered: no further change, so no further timer
            return;
        }
        s.rpTimer = ns3::Simulator::Schedule(ns3::PicoSeconds(R.dcqcn.increaseIntervalPs),
                                             &RoceNic::RateIncrease, this, q);
        if (s.active)
        {
            Kick(); // the faster rate may let the QP send earlier than planned
        }
    }

    Replay* m_replay = nullptr;
    HostCapture* m_cap = nullptr;
    ns3::DataRate m_rate;
    double m_lineBps = 0;
    ns3::Time m_ifg;
    ns3::Ptr<ns3::Ipv4L3Protocol> m_ipv4;
    ns3::Ipv4Address m_addr;
    ns3::Ptr<ns3::Socket> m_sock;
    std::vector<uint32_t> m_active;                 // QP ids with posted messages
    std::set<std::tuple<int64_t, uint32_t, uint32_t>> m_fifo; // (head posted, head line, QP)
    std::unordered_map<uint32_t, uint32_t> m_txq;   // our requester QPN -> QP id
    std::unordered_map<uint32_t, uint32_t> m_rxq;   // our responder QPN -> QP id
    std::unordered_map<uint32_t, uint32_t> m_msn;   // per requester QPN: messages ACKed
    size_t m_rr = 0;
    ns3::EventId m_sendEvent, m_unpause;
    int64_t m_wireFreePs = 0, m_pausedUntilPs = 0, m_pausedAt = 0;
};

inline void Replay::Begin()
{
    for (uint32_t q = 0; q < qpSrc.size(); ++q)
    {
        nics[qpSrc[q]]->OwnQp(qpSqpn[q], q);
        nics[qpDst[q]]->ExpectQp(qpDqpn[q], q);
    }
    for (uint32_t f = 0; f < src.size(); ++f)
    {
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
    nics[src[f]]->Post(f);
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

namespace tracegen
{

inline void SetUpstreamNic(ns3::Ptr<SwitchMmu> mmu, uint32_t iface, ns3::Ptr<RoceNic> nic,
                           int64_t delayPs, int64_t quantaPs, uint64_t headroom)
{
    mmu->SetUpstream(iface, ns3::PeekPointer(nic), delayPs, quantaPs, headroom);
}

} // namespace tracegen
