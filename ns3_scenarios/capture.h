// Host NIC captures for `tracegen ns3 run --pcap`: one nanosecond pcap (Ethernet link type) per
// host with every frame its NIC sends and receives, as a RoCE lab capture shows them.
//
// ns-3's point-to-point devices carry PPP; each captured packet gets the Ethernet framing a real
// link has instead: MACs (host h = 02:00:00:00:hh:hh, the switch port = 02:01:00:00:ss:ss),
// 802.1Q VLAN 100 with PCP 3 for RoCE data/ACKs and 6 for CNPs (from the DSCP), EtherType IPv4.
// PFC PAUSE frames the host receives are written as the 802.1Qbb frames they stand for (MAC
// control 0x8808, opcode 0x0101, priority-enable vector and quanta). Payload bytes are the
// simulator's zero bytes (deterministic). A shared byte budget stops writing once reached
// (records not written are counted), so a capture never exceeds what the caller allowed.
#pragma once

#include "ns3/core-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace tracegen
{

struct CaptureBudget
{
    uint64_t limitBytes = 0; // 0: no limit
    uint64_t written = 0;
    uint64_t recordsDropped = 0;
};

class HostCapture
{
  public:
    HostCapture(const std::string& path, uint32_t host, uint32_t switchNode, CaptureBudget* budget)
        : m_budget(budget)
    {
        m_f = std::fopen(path.c_str(), "wb");
        uint8_t mac[6] = {0x02, 0x00, 0x00, 0x00, uint8_t(host >> 8), uint8_t(host)};
        uint8_t sw[6] = {0x02, 0x01, 0x00, 0x00, uint8_t(switchNode >> 8), uint8_t(switchNode)};
        std::memcpy(m_mac, mac, 6);
        std::memcpy(m_sw, sw, 6);
        uint32_t hdr[6] = {0xa1b23c4d, 0x00040002, 0, 0, 65535, 1}; // ns pcap, v2.4, Ethernet
        Write(hdr, sizeof hdr);
        m_budget->written += sizeof hdr;
    }

    ~HostCapture()
    {
        Close();
    }

    bool Ok() const
    {
        return m_f != nullptr;
    }

    void Close()
    {
        if (m_f)
        {
            std::fclose(m_f);
            m_f = nullptr;
        }
    }

    // PromiscSniffer of the host's point-to-point device: PPP header + IPv4 packet, sent or
    // received (told apart by the IPv4 source address).
    void OnSniff(ns3::Ptr<const ns3::Packet> p)
    {
        uint32_t n = p->GetSize();
        if (n < 2 + 20)
        {
            return;
        }
        m_buf.resize(n);
        p->CopyData(m_buf.data(), n);
        const uint8_t* ip = m_buf.data() + 2;
        uint32_t ipLen = n - 2;
        uint32_t src = (uint32_t(ip[12]) << 24) | (uint32_t(ip[13]) << 16) | (uint32_t(ip[14]) << 8) | ip[15];
        bool tx = src == m_ip;
        uint8_t pcp = (ip[1] >> 2) == 48 ? 6 : 3;
        uint8_t eth[18];
        std::memcpy(eth, tx ? m_sw : m_mac, 6);
        std::memcpy(eth + 6, tx ? m_mac : m_sw, 6);
        eth[12] = 0x81;
        eth[13] = 0x00;
        uint16_t tci = uint16_t(pcp << 13) | 100;
        eth[14] = tci >> 8;
        eth[15] = tci & 0xFF;
        eth[16] = 0x08;
        eth[17] = 0x00;
        Record(eth, sizeof eth, ip, ipLen);
    }

    // An 802.1Qbb PAUSE for priority 3 arriving from the switch (quanta 0: resume).
    void Pfc(uint16_t quanta)
    {
        uint8_t f[60] = {0x01, 0x80, 0xC2, 0x00, 0x00, 0x01};
        std::memcpy(f + 6, m_sw, 6);
        f[12] = 0x88;
        f[13] = 0x08;
        f[14] = 0x01; // opcode 0x0101: priority-based flow control
        f[15] = 0x01;
        f[16] = 0x00; // priority-enable vector: priority 3
        f[17] = 0x08;
        f[18 + 2 * 3] = quanta >> 8;
        f[19 + 2 * 3] = quanta & 0xFF;
        Record(f, sizeof f, nullptr, 0);
    }

    void SetIp(uint32_t ip)
    {
        m_ip = ip;
    }

  private:
    void Record(const uint8_t* a, uint32_t na, const uint8_t* b, uint32_t nb)
    {
        if (!m_f)
        {
            return;
        }
        uint64_t rec = 16 + na + nb;
        if (m_budget->limitBytes && m_budget->written + rec > m_budget->limitBytes)
        {
            m_budget->recordsDropped++;
            return;
        }
        int64_t ns = ns3::Simulator::Now().GetNanoSeconds();
        uint32_t h[4] = {uint32_t(ns / 1000000000), uint32_t(ns % 1000000000), na + nb, na + nb};
        Write(h, sizeof h);
        Write(a, na);
        if (nb)
        {
            Write(b, nb);
        }
        m_budget->written += rec;
    }

    void Write(const void* p, size_t n)
    {
        if (m_f && std::fwrite(p, 1, n, m_f) != n)
        {
            Close();
        }
    }

    std::FILE* m_f = nullptr;
    CaptureBudget* m_budget;
    uint8_t m_mac[6], m_sw[6];
    uint32_t m_ip = 0;
    std::vector<uint8_t> m_buf;
};

inline void AttachCapture(ns3::Ptr<ns3::NetDevice> dev, HostCapture* cap)
{
    dev->TraceConnectWithoutContext("PromiscSniffer",
                                    ns3::MakeCallback(&HostCapture::OnSniff, cap));
}

} // namespace tracegen
