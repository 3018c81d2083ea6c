// A lossless RoCE switch for mainline ns-3: egress queues with a strict-priority CNP lane over the
// RoCE data lane, ECN marking of data as it leaves (DCQCN's RED on the data backlog it leaves
// behind: probability rising to Pmax between Kmin and Kmax bytes, every packet above Kmax; at
// dequeue, as HPCC's switch does, so the mark does not wait out the queue), and PFC on the data
// priority (3) with a shared buffer, per-ingress-port Xoff/Xon thresholds and PAUSE frames.
//
// PFC, as 802.1Qbb and HPCC's SwitchMmu do it:
//   - every data packet is counted against the ingress port it arrived on (IngressTag, set by the
//     routing on arrival) from the moment it is queued at an egress port until it leaves;
//   - ingress bytes >= Xoff -> PAUSE (priority 3, `pauseQuanta` x 512 bit times) to the upstream
//     device, refreshed every half pause time while still above; ingress bytes + resumeOffset <=
//     Xoff (or 0) -> PAUSE with quanta 0 (resume). Xoff is static (`xoffBytes` > 0) or dynamic:
//     (buffer - headroom of all ports - buffered bytes) >> alphaShift (HPCC, Broadcom's alpha 1/8);
//   - a PAUSE takes effect upstream one link delay plus one 84-byte frame time after it is sent
//     (sent at once: the MAC puts control frames between data frames);
//   - a packet that would overflow the switch's buffer is dropped (counted): with PFC on and
//     headroom for the link's in-flight bytes it does not happen.
// Loaded with cppyy.cppdef before ecmp_routing.h and roce_nic.h.
#pragma once

#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <vector>

namespace tracegen
{

const uint8_t DSCP_CNP = 48;       // CNPs: priority 6, strict, never paused
const uint32_t PFC_FRAME_WIRE_BYTES = 64 + 8 + 12; // minimum frame + preamble + IFG

// Who stops sending data when a PAUSE arrives: a switch egress queue or a host NIC.
class PauseTarget
{
  public:
    virtual ~PauseTarget() = default;
    // durPs > 0: stop the data priority for durPs (restarting the timer); 0: resume now.
    virtual void OnPause(int64_t durPs) = 0;
};

// The ingress interface a packet arrived on at the switch that holds it.
class IngressTag : public ns3::Tag
{
  public:
    IngressTag() = default;

    explicit IngressTag(uint32_t iface)
        : m_iface(iface)
    {
    }

    static ns3::TypeId GetTypeId()
    {
        static ns3::TypeId tid = ns3::TypeId("tracegen::IngressTag")
                                     .SetParent<ns3::Tag>()
                                     .AddConstructor<IngressTag>();
        return tid;
    }

    ns3::TypeId GetInstanceTypeId() const override
    {
        return GetTypeId();
    }

    uint32_t GetSerializedSize() const override
    {
        return 4;
    }

    void Serialize(ns3::TagBuffer i) const override
    {
        i.WriteU32(m_iface);
    }

    void Deserialize(ns3::TagBuffer i) override
    {
        m_iface = i.ReadU32();
    }

    void Print(std::ostream& os) const override
    {
        os << "iif=" << m_iface;
    }

    uint32_t Iface() const
    {
        return m_iface;
    }

  private:
    uint32_t m_iface = 0;
};

inline bool IsCnp(ns3::Ptr<const ns3::QueueDiscItem> item)
{
    ns3::Ptr<const ns3::Ipv4QueueDiscItem> ip = ns3::DynamicCast<const ns3::Ipv4QueueDiscItem>(item);
    return ip && (ip->GetHeader().GetTos() >> 2) == DSCP_CNP;
}

// One switch's shared buffer and PFC state, per ns-3 interface index (1..n; 0 is loopback).
class SwitchMmu : public ns3::Object
{
  public:
    static ns3::TypeId GetTypeId()
    {
        static ns3::TypeId tid = ns3::TypeId("tracegen::SwitchMmu")
                                     .SetParent<ns3::Object>()
                                     .AddConstructor<SwitchMmu>();
        return tid;
    }

    // ---- configuration (from Python, before the run; a method: cppyy's ns3::Ptr proxy does
    // not forward field assignment)
    bool pfc = true;
    uint64_t bufferBytes = 32u << 20;
    uint64_t xoffBytes = 0;        // 0: dynamic threshold
    uint64_t resumeOffset = 3072;
    uint32_t alphaShift = 3;

    void Configure(bool pfcOn, uint64_t buffer, uint64_t xoff, uint64_t offset)
    {
        pfc = pfcOn;
        bufferBytes = buffer;
        xoffBytes = xoff;
        resumeOffset = offset;
    }

    void SetPorts(uint32_t n)
    {
        m_ingress.assign(n + 1, 0);
        m_headroom.assign(n + 1, 0);
        m_xoff.assign(n + 1, false);
        m_upstream.assign(n + 1, nullptr);
        m_delayPs.assign(n + 1, 0);
        m_quantaPs.assign(n + 1, 0);
        m_refresh.assign(n + 1, ns3::EventId());
        pauseSent.assign(n + 1, 0);
        resumeSent.assign(n + 1, 0);
        maxIngress.assign(n + 1, 0);
    }

    // The device at the other end of `iface` (what a PAUSE sent on iface stops), the PAUSE's
    // delay to take effect there, one PAUSE's duration at the link rate, and the headroom.
    void SetUpstream(uint32_t iface, PauseTarget* t, int64_t delayPs, int64_t quantaPs,
                     uint64_t headroom)
    {
        m_upstream[iface] = t;
        m_delayPs[iface] = delayPs;
        m_quantaPs[iface] = quantaPs;
        m_headroom[iface] = headroom;
        m_totalHeadroom = 0;
        for (uint64_t h : m_headroom)
        {
            m_totalHeadroom += h;
        }
    }

    // ---- from the egress queues
    bool Admit(uint32_t bytes) const
    {
        return m_used + bytes <= bufferBytes;
    }

    void Enqueued(uint32_t iif, uint32_t bytes, bool data)
    {
        m_used += bytes;
        maxUsed = std::max(maxUsed, m_used);
        if (data && iif < m_ingress.size())
        {
            m_ingress[iif] += bytes;
            maxIngress[iif] = std::max(maxIngress[iif], m_ingress[iif]);
            CheckPause(iif);
        }
    }

    void Dequeued(uint32_t iif, uint32_t bytes, bool data)
    {
        m_used -= std::min<uint64_t>(m_used, bytes);
        if (data && iif < m_ingress.size())
        {
            m_ingress[iif] -= std::min<uint64_t>(m_ingress[iif], bytes);
            CheckResume(iif);
        }
    }

    uint64_t Xoff(uint32_t iif) const
    {
        if (xoffBytes > 0)
        {
            return xoffBytes;
        }
        uint64_t reserved = m_totalHeadroom + m_used;
        return reserved >= bufferBytes ? 0 : (bufferBytes - reserved) >> alphaShift;
    }

    // ---- results
    std::vector<uint32_t> pauseSent, resumeSent;
    std::vector<uint64_t> maxIngress;
    uint64_t maxUsed = 0;

  private:
    void CheckPause(uint32_t iif)
    {
        if (pfc && !m_xoff[iif] && m_upstream[iif] && m_ingress[iif] >= Xoff(iif))
        {
            m_xoff[iif] = true;
            SendPause(iif);
        }
    }

    void CheckResume(uint32_t iif)
    {
        if (m_xoff[iif] && (m_ingress[iif] == 0 || m_ingress[iif] + resumeOffset <= Xoff(iif)))
        {
            m_xoff[iif] = false;
            ns3::Simulator::Cancel(m_refresh[iif]);
            resumeSent[iif]++;
            ns3::Simulator::Schedule(ns3::PicoSeconds(m_delayPs[iif]), &SwitchMmu::Deliver, this,
                                     iif, int64_t(0));
        }
    }

    void SendPause(uint32_t iif)
    {
        pauseSent[iif]++;
        ns3::Simulator::Schedule(ns3::PicoSeconds(m_delayPs[iif]), &SwitchMmu::Deliver, this, iif,
                                 m_quantaPs[iif]);
        // still congested half a pause later: pause again before the upstream times out
        m_refresh[iif] = ns3::Simulator::Schedule(ns3::PicoSeconds(std::max<int64_t>(
                                                      m_quantaPs[iif] / 2, 1)),
                                                  &SwitchMmu::Refresh, this, iif);
    }

    void Refresh(uint32_t iif)
    {
        if (m_xoff[iif])
        {
            SendPause(iif);
        }
    }

    void Deliver(uint32_t iif, int64_t durPs)
    {
        m_upstream[iif]->OnPause(durPs);
    }

    uint64_t m_used = 0, m_totalHeadroom = 0;
    std::vector<uint64_t> m_ingress, m_headroom;
    std::vector<bool> m_xoff;
    std::vector<PauseTarget*> m_upstream;
    std::vector<int64_t> m_delayPs, m_quantaPs;
    std::vector<ns3::EventId> m_refresh;
};

// A switch egress port (root queue disc of one device).
class RoceQueueDisc : public ns3::QueueDisc, public PauseTarget
{
  public:
    static ns3::TypeId GetTypeId()
    {
        static ns3::TypeId tid = ns3::TypeId("tracegen::RoceQueueDisc")
                                     .SetParent<ns3::QueueDisc>()
                                     .SetGroupName("TrafficControl")
                                     .AddConstructor<RoceQueueDisc>();
        return tid;
    }

    RoceQueueDisc()
        : ns3::QueueDisc(ns3::QueueDiscSizePolicy::NO_LIMITS)
    {
    }

    void Configure(ns3::Ptr<SwitchMmu> mmu, double kminBytes, double kmaxBytes, double pmax,
                   int64_t stream)
    {
        m_mmu = mmu;
        m_kmin = kminBytes;
        m_kmax = kmaxBytes;
        m_pmax = pmax;
        m_rng = ns3::CreateObject<ns3::UniformRandomVariable>();
        m_rng->SetStream(stream);
    }

    void OnPause(int64_t durPs) override
    {
        int64_t now = ns3::Simulator::Now().GetPicoSeconds();
        ns3::Simulator::Cancel(m_expire);
        if (durPs > 0)
        {
            pausesRx++;
            if (!m_paused)
            {
                m_paused = true;
                m_pausedAt = now;
            }
            m_expire = ns3::Simulator::Schedule(ns3::PicoSeconds(durPs), &RoceQueueDisc::Unpause,
                                                this);
        }
        else
        {
            Unpause();
        }
    }

    // ---- results
    uint64_t txBytes = 0, txPkts = 0, ceMarks = 0, maxDataBytes = 0, drops = 0;
    uint32_t pausesRx = 0;
    int64_t pausedPs = 0;

    int64_t PausedPsNow() const
    {
        return pausedPs + (m_paused ? ns3::Simulator::Now().GetPicoSeconds() - m_pausedAt : 0);
    }

  private:
    void Unpause()
    {
        if (m_paused)
        {
            m_paused = false;
            pausedPs += ns3::Simulator::Now().GetPicoSeconds() - m_pausedAt;
            Run(); // the device may be idle: nothing else would restart the queue
        }
    }

    bool DoEnqueue(ns3::Ptr<ns3::QueueDiscItem> item) override
    {
        bool cnp = IsCnp(item);
        uint32_t size = item->GetSize();
        if (!m_mmu->Admit(size))
        {
            drops++;
            DropBeforeEnqueue(item, "switch buffer full");
            return false;
        }
        bool ok = GetInternalQueue(cnp ? 0 : 1)->Enqueue(item);
        if (!ok)
        {
            return false;
        }
        IngressTag tag;
        uint32_t iif = item->GetPacket()->PeekPacketTag(tag) ? tag.Iface() : 0;
        m_mmu->Enqueued(iif, size, !cnp);
        if (!cnp)
        {
            m_dataBytes += size;
            maxDataBytes = std::max(maxDataBytes, m_dataBytes);
        }
        return true;
    }

    ns3::Ptr<ns3::QueueDiscItem> DoDequeue() override
    {
        bool cnp = !GetInternalQueue(0)->IsEmpty();
        if (!cnp && (m_paused || GetInternalQueue(1)->IsEmpty()))
        {
            return nullptr;
        }
        ns3::Ptr<ns3::QueueDiscItem> item = GetInternalQueue(cnp ? 0 : 1)->Dequeue();
        uint32_t size = item->GetSize();
        IngressTag tag;
        uint32_t iif = item->GetPacket()->RemovePacketTag(tag) ? tag.Iface() : 0;
        m_mmu->Dequeued(iif, size, !cnp);
        if (!cnp)
        { // DCQCN's RED on the data backlog the packet leaves behind
            m_dataBytes -= size;
            double q = double(m_dataBytes);
            bool mark = q > m_kmax ||
                        (q > m_kmin && m_rng->GetValue() < m_pmax * (q - m_kmin) / (m_kmax - m_kmin));
            if (mark && Mark(item, "ecn"))
            {
                ceMarks++;
            }
        }
        txBytes += size;
        txPkts++;
        return item;
    }

    bool CheckConfig() override
    {
        if (GetNInternalQueues() == 0)
        {
            for (int i = 0; i < 2; ++i)
            { // the switch buffer (SwitchMmu) is the limit, not these queues
                AddInternalQueue(ns3::CreateObjectWithAttributes<ns3::DropTailQueue<ns3::QueueDiscItem>>(
                    "MaxSize", ns3::QueueSizeValue(ns3::QueueSize("4294967295p"))));
            }
        }
        return true; // Configure() gives the MMU before the run
    }

    void InitializeParams() override
    {
    }

    ns3::Ptr<SwitchMmu> m_mmu;
    ns3::Ptr<ns3::UniformRandomVariable> m_rng;
    double m_kmin = 0, m_kmax = 1, m_pmax = 0;
    uint64_t m_dataBytes = 0;
    bool m_paused = false;
    int64_t m_pausedAt = 0;
    ns3::EventId m_expire;
};

// TrafficControlHelper finds the queue disc by its TypeId name: register it first (cppyy-defined
// classes have no static registration).
inline ns3::Ptr<RoceQueueDisc> InstallRoceQueue(ns3::Ptr<ns3::NetDevice> dev)
{
    RoceQueueDisc::GetTypeId();
    ns3::TrafficControlHelper tch;
    tch.SetRootQueueDisc("tracegen::RoceQueueDisc");
    return ns3::DynamicCast<RoceQueueDisc>(tch.Install(dev).Get(0));
}

inline void SetUpstreamQueue(ns3::Ptr<SwitchMmu> mmu, uint32_t iface, ns3::Ptr<RoceQueueDisc> q,
                             int64_t delayPs, int64_t quantaPs, uint64_t headroom)
{
    mmu->SetUpstream(iface, ns3::PeekPointer(q), delayPs, quantaPs, headroom);
}

} // namespace tracegen
