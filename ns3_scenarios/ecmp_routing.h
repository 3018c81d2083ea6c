// ECMP routing for tracegen's ns-3 fabric: per destination host, a list of equal-cost output
// interfaces; a packet takes entry FlowHash(src IP, dst IP, UDP ports) % n, like a switch's
// 5-tuple hash, so every QP keeps one path (no reordering) and different QPs spread out.
// (A plain "sport % n" would send the k-th flow of every host to the same spine: the HPCC
// source ports count from 10000 on every host.) ns-3's Ipv4GlobalRouting only offers per-packet
// random ECMP, hence this class.
//
// Hosts are addressed as the HPCC simulators do: host i = 11.(i/256).(i%256).1.
#pragma once

#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/traffic-control-module.h"

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
        if (c.size() > 1 && h.GetProtocol() == 17)
        {
            uint8_t b[4] = {0, 0, 0, 0};
            p->CopyData(b, 4); // the UDP header leads the IP payload
            uint32_t k = FlowHash(h.GetSource().Get(), h.GetDestination().Get(),
                                  (uint16_t(b[0]) << 8) | b[1], (uint16_t(b[2]) << 8) | b[3]);
            iface = c[k % c.size()];
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
    std::vector<ns3::Ptr<ns3::Ipv4Route>> m_routes;
};

// RED draws its marking decisions from a random stream; a fixed stream per queue makes a run
// byte-identical whatever ran before it in the process (automatic streams keep counting).
inline void AssignQueueStream(ns3::Ptr<ns3::QueueDisc> q, int64_t stream)
{
    ns3::Ptr<ns3::RedQueueDisc> red = ns3::DynamicCast<ns3::RedQueueDisc>(q);
    if (red)
    {
        red->AssignStreams(stream);
    }
}

} // namespace tracegen
