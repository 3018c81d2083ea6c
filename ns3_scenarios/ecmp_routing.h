// Routing for tracegen's ns-3 fabric, data-driven: per destination host, a list of equal-cost
// output interfaces; a packet takes entry FlowHash(src IP, dst IP, UDP ports) % n, like a switch's
// 5-tuple hash, so every QP keeps one path (no reordering) and different QPs spread out.
// Explicit routes override the hash: AddFlowRoute(sip, dip, sport, iface) pins the packets of one
// QP (its 5-tuple) to an interface at this node, so a scenario that carries each QP's path
// (manifest `qps[].path`, e.g. the schedule's own ECMP choices) is routed exactly that way.
// ns-3's Ipv4GlobalRouting only offers per-packet random ECMP, hence this class. At a switch,
// arriving packets are tagged with their ingress interface (IngressTag) for PFC accounting.
//
// Hosts are addressed as the HPCC simulators do: host i = 11.(i/256).(i%256).1.
#pragma once

#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace tracegen
{

class EcmpRouting : public ns3::Ipv4RoutingProtocol
{
  public:
    static ns3::TypeId GetTypeId()
    {
        static ns3::TypeId tid = ns3::TypeId("tracegen::EcmpRouting")
                                     .SetParent<ns3::Ipv4RoutingProtocol>()
                                     .SetGroupName("Internet")
                                     .AddConstructor<EcmpRouting>();
        return tid;
    }

    // Equal-cost next hops towards `host`, in the order the ECMP index picks them.
    void AddNextHop(uint32_t host, uint32_t iface)
    {
        if (host >= m_next.size())
        {
            m_next.resize(host + 1);
        }
        m_next[host].push_back(iface);
    }

    // This QP's packets (src IP, dst IP, UDP source port) leave this node through `iface`.
    void AddFlowRoute(uint32_t sip, uint32_t dip, uint16_t sport, uint32_t iface)
    {
        m_flow[FlowKey(sip, dip, sport)] = iface;
    }

    // A link event: an interface whose link is down leaves the ECMP choice (packets the hash
    // would send there take the other members, as a switch drops a dead member from its group);
    // QPs pinned through it are pinned anew by the same event (manifest link_events repin).
    void SetIfaceDown(uint32_t iface, bool down)
    {
        if (down)
        {
            m_down.insert(iface);
        }
        else
        {
            m_down.erase(iface);
        }
    }

    // Switches tag arriving packets with their ingress interface (PFC accounting).
    void SetSwitch(bool isSwitch)
    {
        m_switch = isSwitch;
    }

    // Lossless: host addresses 11.x.y.1 carry 16 bits of host id each.
    static uint64_t FlowKey(uint32_t sip, uint32_t dip, uint16_t sport)
    {
        return (uint64_t((sip >> 8) & 0xFFFF) << 32) | (uint64_t((dip >> 8) & 0xFFFF) << 16) | sport;
    }

    // murmur3's 32-bit finalizer over the 4-tuple: cheap, and well mixed in the low bits.
    static uint32_t FlowHash(uint32_t sip, uint32_t dip, uint16_t sport, uint16_t dport)
    {
        uint32_t h = sip * 0x9E3779B1u ^ dip * 0x85EBCA77u ^ ((uint32_t(sport) << 16) | dport);
        h ^= h >> 16;
        h *= 0x85EBCA6Bu;
        h ^= h >> 13;
        h *= 0xC2B2AE35u;
        h ^= h >> 16;
        return h;
    }

    static bool HostOf(ns3::Ipv4Address a, uint32_t& host)
    {
        uint32_t ip = a.Get();
        host = ((ip >> 16) & 0xFF) * 256 + ((ip >> 8) & 0xFF);
        return (ip >> 24) == 11 && (ip & 0xFF) == 1;
    }

    ns3::Ptr<ns3::Ipv4Route> RouteOutput(ns3::Ptr<ns3::Packet> p,
                                         const ns3::Ipv4Header& header,
                                         ns3::Ptr<ns3::NetDevice> oif,
                                         ns3::Socket::SocketErrno& sockerr) override
    {
        ns3::Ptr<ns3::Ipv4Route> r = Lookup(p, header);
        sockerr = r ? ns3::Socket::ERROR_NOTERROR : ns3::Socket::ERROR_NOROUTETOHOST;
        return r;
    }

    bool RouteInput(ns3::Ptr<const ns3::Packet> p,
                    const ns3::Ipv4Header& header,
                    ns3::Ptr<const ns3::NetDevice> idev,
                    const UnicastForwardCallback& ucb,
                    const MulticastForwardCallback& mcb,
                    const LocalDeliverCallback& lcb,
                    const ErrorCallback& ecb) override
    {
        int32_t iif = m_ipv4->GetInterfaceForDevice(idev);
        if (m_ipv4->IsDestinationAddress(header.GetDestination(), iif))
        {
            lcb(p, header, iif);
            return true;
        }
        ns3::Ptr<ns3::Ipv4Route> r = Lookup(p, header);
        if (!r)
        {
            ecb(p, header, ns3::Socket::ERROR_NOROUTETOHOST);
            return false;
        }
        if (m_switch)
        {
            p->AddPacketTag(IngressTag(uint32_t(iif)));
        }
        ucb(r, p, header);
        return true;
    }

    void NotifyInterfaceUp(uint32_t) override {}
    void NotifyInterfaceDown(uint32_t) override {}
    void NotifyAddAddress(uint32_t, ns3::Ipv4InterfaceAddress) override {}
    void NotifyRemoveAddress(uint32_t, ns3::Ipv4InterfaceAddress) override {}

    void SetIpv4(ns3::Ptr<ns3::Ipv4> ipv4) override
    {
        m_ipv4 = ipv4;
    }

    void PrintRoutingTable(ns3::Ptr<ns3::OutputStreamWrapper> stream,
                           ns3::Time::Unit) const override
    {
        std::ostream& os = *stream->GetStream();
        for (size_t h = 0; h < m_next.size(); ++h)
        {
            for (uint32_t i : m_next[h])
            {
                os << "host " << h << " -> if " << i << "\n";
            }
        }
    }

  private:
    ns3::Ptr<ns3::Ipv4Route> Lookup(ns3::Ptr<const ns3::Packet> p, const ns3::Ipv4Header& h)
    {
        uint32_t host;
        if (!HostOf(h.GetDestination(), host) || host >= m_next.size() || m_next[host].empty())
        {
            return nullptr;
        }
        const std::vector<uint32_t>& c = m_next[host];
        uint32_t iface = c[0];
        if ((c.size() > 1 || !m_flow.empty()) && h.GetProtocol() == 17)
        {
            uint8_t b[4] = {0, 0, 0, 0};
            p->CopyData(b, 4); // the UDP header leads the IP payload
            uint16_t sport = (uint16_t(b[0]) << 8) | b[1], dport = (uint16_t(b[2]) << 8) | b[3];
            auto it = m_flow.find(FlowKey(h.GetSource().Get(), h.GetDestination().Get(), sport));
            if (it != m_flow.end())
            {
                return RouteVia(it->second);
            }
            if (c.size() > 1)
            {
                uint32_t k = FlowHash(h.GetSource().Get(), h.GetDestination().Get(), sport, dport);
                iface = c[k % c.size()];
                if (!m_down.empty())
                {
                    std::vector<uint32_t> up;
                    for (uint32_t i : c)
                    {
                        if (!m_down.count(i))
                        {
                            up.push_back(i);
                        }
                    }
                    if (!up.empty())
                    {
                        iface = up[k % up.size()];
                    }
                }
            }
        }
        return RouteVia(iface);
    }

    // One cached route per interface: point-to-point links need no gateway address.
    ns3::Ptr<ns3::Ipv4Route> RouteVia(uint32_t iface)
    {
        if (iface >= m_routes.size())
        {
            m_routes.resize(iface + 1);
        }
        if (!m_routes[iface])
        {
            ns3::Ptr<ns3::Ipv4Route> r = ns3::Create<ns3::Ipv4Route>();
            r->SetOutputDevice(m_ipv4->GetNetDevice(iface));
            r->SetGateway(ns3::Ipv4Address::GetZero());
            r->SetSource(m_ipv4->GetAddress(iface, 0).GetLocal());
            m_routes[iface] = r;
        }
        return m_routes[iface];
    }

    ns3::Ptr<ns3::Ipv4> m_ipv4;
    std::vector<std::vector<uint32_t>> m_next;
    std::unordered_map<uint64_t, uint32_t> m_flow;
    std::unordered_set<uint32_t> m_down;
    bool m_switch = false;
    std::vector<ns3::Ptr<ns3::Ipv4Route>> m_routes;
};

// A scenario's timed link events (manifest link_events), scheduled before the run at their
// absolute simulated time (setup runs at t = 0). A rate change sets both ends' DataRate and the
// InterframeGap that stands for the Ethernet overhead at that rate (scenario.py _ifg_ps).
inline void SetLinkRate(ns3::Ptr<ns3::NetDevice> dev, uint64_t bps, uint64_t ifgPs)
{
    ns3::Ptr<ns3::PointToPointNetDevice> p2p = ns3::DynamicCast<ns3::PointToPointNetDevice>(dev);
    p2p->SetDataRate(ns3::DataRate(bps));
    p2p->SetInterframeGap(ns3::PicoSeconds(ifgPs));
}

inline void ScheduleLinkRate(ns3::Ptr<ns3::NetDevice> dev, uint64_t atPs, uint64_t bps, uint64_t ifgPs)
{
    ns3::Simulator::Schedule(ns3::PicoSeconds(atPs), &SetLinkRate, dev, bps, ifgPs);
}

inline void ScheduleIfaceDown(ns3::Ptr<EcmpRouting> r, uint64_t atPs, uint32_t iface, bool down)
{
    ns3::Simulator::Schedule(ns3::PicoSeconds(atPs), &EcmpRouting::SetIfaceDown, r, iface, down);
}

inline void ScheduleFlowRoute(ns3::Ptr<EcmpRouting> r, uint64_t atPs, uint32_t sip, uint32_t dip,
                              uint16_t sport, uint32_t iface)
{
    ns3::Simulator::Schedule(ns3::PicoSeconds(atPs), &EcmpRouting::AddFlowRoute, r, sip, dip, sport, iface);
}

} // namespace tracegen
