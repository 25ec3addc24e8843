-- Wireshark dissector for the wire formats of ltp-testbed:
--   ltpt  the native core's datagrams (LTP, PLOT and the schemes built on the core: DATA, ACK,
--         CLOSE, HELLO, HELLO_ACK; docs/ltp-protocol.md section 2, versions 3 to 5,
--         little-endian)
--   ltpp  the peer multicast transport's datagrams (DATA, POLL, STATUS, CLOSE;
--         docs/peer-transports.md "Datagrams", version 2, network byte order)
--
-- Both are found by a heuristic on UDP (the magic, the version and the type), and each has a
-- "Decode As" entry and a UDP port preference for captures the heuristic would not take.
-- Captures cut at a snap length (run-sweep --capture: 128 bytes) keep the headers; fields past
-- the cut (the payload, a long ACK bitmap, the MAC trailer) are reported as not captured, never
-- as malformed. Use:
--   tshark -X lua_script:transports/wireshark/ltp.lua -r capture.pcap -Y ltpt
-- or copy this file to ~/.local/lib/wireshark/plugins/ (docs/reading-a-capture.md).

local LTP_MAGIC = 0x504C          -- "LP", little-endian u16
local LTP_VERSIONS = { [3] = 8, [4] = 16, [5] = 16 }   -- version -> trailer bytes with auth on:
                                  -- version 3 ends in the tag alone, 4 and 5 in the number and tag
local LTP_HDR = 20
local LTP_DATA_HDR = 52
local LTP_ACK_HDR = 48
local LTP_CLOSE = 40
local LTP_PS_RANK = 65535

local ltp_types = { [1] = "DATA", [2] = "ACK", [3] = "CLOSE", [4] = "HELLO", [5] = "HELLO_ACK" }
local ltp_macs = { [0] = "none", [1] = "SipHash-2-4 trailer", [2] = "AES-128-GMAC trailer" }
local close_reasons = { [1] = "complete", [2] = "early", [3] = "max-wait", [4] = "stale" }

local ltp = Proto("ltpt", "LTP (ltp-testbed loss-tolerant transport)")
local f = {
    magic = ProtoField.uint16("ltpt.magic", "Magic", base.HEX),
    version = ProtoField.uint8("ltpt.version", "Version", base.DEC),
    type = ProtoField.uint8("ltpt.type", "Type", base.DEC, ltp_types),
    flags = ProtoField.uint8("ltpt.flags", "Flags", base.HEX),
    critical = ProtoField.bool("ltpt.flags.critical", "Critical", 8, nil, 0x01),
    retransmit = ProtoField.bool("ltpt.flags.retransmit", "Retransmission", 8, nil, 0x02),
    pass_done = ProtoField.bool("ltpt.flags.pass_done", "Last of the first pass", 8, nil, 0x04),
    probe = ProtoField.bool("ltpt.flags.probe", "Probe", 8, nil, 0x08),
    mac_kind = ProtoField.uint8("ltpt.mac_kind", "MAC", base.DEC, ltp_macs),
    sender = ProtoField.uint16("ltpt.sender", "Sender rank", base.DEC),
    session = ProtoField.uint32("ltpt.session", "Session id", base.HEX),
    msg_id = ProtoField.uint32("ltpt.msg_id", "Message id", base.DEC),
    nonce = ProtoField.uint32("ltpt.nonce", "Nonce", base.HEX),
    segment = ProtoField.uint16("ltpt.segment", "Segment", base.DEC),
    critical_count = ProtoField.uint16("ltpt.critical_count", "Critical packets", base.DEC),
    index = ProtoField.uint32("ltpt.index", "Packet index", base.DEC),
    count = ProtoField.uint32("ltpt.count", "Packet count", base.DEC),
    offset = ProtoField.uint32("ltpt.offset", "Byte offset", base.DEC),
    total = ProtoField.uint32("ltpt.total", "Message bytes", base.DEC),
    payload_len = ProtoField.uint16("ltpt.payload_len", "Payload bytes", base.DEC),
    reserved = ProtoField.bytes("ltpt.reserved", "Reserved"),
    open_back = ProtoField.uint16("ltpt.open_back", "Older messages still open at the sender",
                                  base.DEC),
    tx_seq = ProtoField.uint32("ltpt.tx_seq", "Transmission sequence", base.DEC),
    ts = ProtoField.uint32("ltpt.ts", "Send timestamp (us)", base.DEC),
    srtt = ProtoField.uint32("ltpt.srtt", "Sender's smoothed RTT (us)", base.DEC),
    payload = ProtoField.bytes("ltpt.payload", "Payload"),
    received = ProtoField.uint32("ltpt.received", "Packets received", base.DEC),
    base_idx = ProtoField.uint32("ltpt.ack.base", "Base (lowest missing index)", base.DEC),
    echo_ts = ProtoField.uint32("ltpt.echo_ts", "Echoed timestamp (us)", base.DEC),
    ack_delay = ProtoField.uint32("ltpt.ack.delay", "ACK delay (us)", base.DEC),
    echo_seq = ProtoField.uint32("ltpt.echo_seq", "Echoed transmission sequence", base.DEC),
    bitmap_bits = ProtoField.uint16("ltpt.ack.bitmap_bits", "Bitmap bits", base.DEC),
    rate_hint = ProtoField.uint32("ltpt.ack.rate_hint", "Rate hint (kbit/s)", base.DEC),
    bitmap = ProtoField.bytes("ltpt.ack.bitmap", "Bitmap (bit j: index base + j arrived)"),
    bitmap_held = ProtoField.uint32("ltpt.ack.bitmap_held", "Indices held in the bitmap",
                                    base.DEC),
    close_count = ProtoField.uint32("ltpt.close.count", "Packets in the message", base.DEC),
    reason = ProtoField.uint8("ltpt.close.reason", "Close reason", base.DEC, close_reasons),
    dgram_seq = ProtoField.uint64("ltpt.dgram_seq", "Datagram number", base.DEC),
    mac = ProtoField.bytes("ltpt.mac", "MAC tag"),
}
ltp.fields = f

local e = {
    retransmit = ProtoExpert.new("ltpt.retransmission", "Retransmitted DATA",
                                 expert.group.SEQUENCE, expert.severity.NOTE),
    probe = ProtoExpert.new("ltpt.probe_sent", "Probe (a tail packet sent again to draw an ACK)",
                            expert.group.SEQUENCE, expert.severity.NOTE),
    early = ProtoExpert.new("ltpt.early_close", "Early close: the receiver ends the message",
                            expert.group.SEQUENCE, expert.severity.NOTE),
    max_wait = ProtoExpert.new("ltpt.max_wait_close", "Close at the receiver's maximum wait",
                               expert.group.SEQUENCE, expert.severity.WARN),
    bad = ProtoExpert.new("ltpt.bad", "Not a valid datagram (the core would count it malformed)",
                          expert.group.MALFORMED, expert.severity.ERROR),
}
ltp.experts = { e.retransmit, e.probe, e.early, e.max_wait, e.bad }

ltp.prefs.port = Pref.uint("UDP port", 0, "Decode this UDP port as LTP (0: heuristic only)")

-- Adds `field` over [off, off + len) if captured (little-endian unless `big`); returns whether
-- it was.
local function add(tree, tvb, field, off, len, big)
    if off + len > tvb:len() then return false end
    if big then tree:add(field, tvb(off, len)) else tree:add_le(field, tvb(off, len)) end
    return true
end

local function uint_le(tvb, off, len)
    if off + len > tvb:len() then return nil end
    return tvb(off, len):le_uint()
end

local function bits_set(range)
    local n = 0
    local bytes = range:bytes()
    for i = 0, bytes:len() - 1 do
        local b = bytes:get_index(i)
        while b > 0 do
            n = n + (b % 2)
            b = math.floor(b / 2)
        end
    end
    return n
end

-- A part of the datagram the capture cut off (not an error: the snap length is a choice).
local function not_captured(tree, tvb, what)
    tree:add(tvb(0, 0), "[" .. what .. ": past the snap length, not captured]")
end

-- Each type's fields after the common header (docs/ltp-protocol.md §2): name in f, offset, length.
local DATA_FIELDS = {{"index", 20, 4}, {"count", 24, 4}, {"offset", 28, 4}, {"total", 32, 4},
                     {"payload_len", 36, 2}, {"open_back", 38, 2}, {"tx_seq", 40, 4},
                     {"ts", 44, 4}, {"srtt", 48, 4}}
local DATA_FIELDS_V4 = {}   -- before version 5 open_back's two bytes were reserved
for i, x in ipairs(DATA_FIELDS) do
    DATA_FIELDS_V4[i] = x[1] == "open_back" and {"reserved", 38, 2} or x
end
local ACK_FIELDS = {{"received", 20, 4}, {"base_idx", 24, 4}, {"echo_ts", 28, 4},
                    {"ack_delay", 32, 4}, {"echo_seq", 36, 4}, {"bitmap_bits", 40, 2},
                    {"reserved", 42, 2}, {"rate_hint", 44, 4}}
local CLOSE_FIELDS = {{"received", 20, 4}, {"close_count", 24, 4}, {"reason", 28, 1},
                      {"reserved", 29, 3}, {"echo_ts", 32, 4}, {"echo_seq", 36, 4}}

local function add_fields(tree, tvb, fields)
    for _, x in ipairs(fields) do add(tree, tvb, f[x[1]], x[2], x[3]) end
end

local function dissect_data(tvb, tree, size, trailer, info)
    local payload = size - LTP_DATA_HDR - trailer
    local index = uint_le(tvb, 20, 4)
    local count = uint_le(tvb, 24, 4)
    local len = uint_le(tvb, 36, 2)
    add_fields(tree, tvb, tvb(2, 1):uint() >= 5 and DATA_FIELDS or DATA_FIELDS_V4)
    if len and len ~= payload then
        tree:add_proto_expert_info(e.bad, string.format(
            "payload length %d, but the datagram leaves %d bytes for it", len, payload))
    end
    if index and count and index >= count then
        tree:add_proto_expert_info(e.bad, "packet index not below the packet count")
    end
    local held = math.min(payload, tvb:len() - LTP_DATA_HDR)
    if held > 0 then tree:add(f.payload, tvb(LTP_DATA_HDR, held)) end
    if held < payload then
        not_captured(tree, tvb, string.format("%d payload bytes", payload - held))
    end
    info[#info + 1] = string.format("idx=%s/%s", index or "?", count or "?")
end

local function dissect_ack(tvb, tree, size, trailer, info)
    add_fields(tree, tvb, ACK_FIELDS)
    local bits = uint_le(tvb, 40, 2)
    local bitmap = size - LTP_ACK_HDR - trailer
    if bits and (bits % 8 ~= 0 or bits / 8 ~= bitmap) then
        tree:add_proto_expert_info(e.bad, string.format(
            "bitmap of %d bits, but the datagram leaves %d bytes for it", bits, bitmap))
    end
    local held = math.min(bitmap, tvb:len() - LTP_ACK_HDR)
    if held > 0 then
        tree:add(f.bitmap, tvb(LTP_ACK_HDR, held))
        if held == bitmap then
            tree:add(f.bitmap_held, tvb(LTP_ACK_HDR, held), bits_set(tvb(LTP_ACK_HDR, held)))
        end
    end
    if held < bitmap then
        not_captured(tree, tvb, string.format("%d bitmap bytes", bitmap - held))
    end
    info[#info + 1] = string.format("recv=%s base=%s", uint_le(tvb, 20, 4) or "?",
                                    uint_le(tvb, 24, 4) or "?")
end

local function dissect_close(tvb, tree, size, trailer, info)
    add_fields(tree, tvb, CLOSE_FIELDS)
    if size ~= LTP_CLOSE + trailer then
        tree:add_proto_expert_info(e.bad, string.format("a CLOSE of %d bytes", size))
    end
    local reason = uint_le(tvb, 28, 1)
    if reason == 2 then tree:add_proto_expert_info(e.early)
    elseif reason == 3 then tree:add_proto_expert_info(e.max_wait)
    elseif reason and not close_reasons[reason] then
        tree:add_proto_expert_info(e.bad, "unknown close reason")
    end
    info[#info + 1] = string.format("%s %s/%s", close_reasons[reason] or "?",
                                    uint_le(tvb, 20, 4) or "?", uint_le(tvb, 24, 4) or "?")
end

-- What both dissectors begin with: nothing (nil) for a datagram shorter than the header, else the
-- protocol's column set and its tree.
local function begin(proto, label, header, tvb, pinfo, root)
    if tvb:len() < header then return nil end
    pinfo.cols.protocol = label
    return root:add(proto, tvb())
end

local function ltp_matches(tvb)
    if tvb:len() < 4 then return false end
    return tvb(0, 2):le_uint() == LTP_MAGIC and LTP_VERSIONS[tvb(2, 1):uint()] ~= nil
        and ltp_types[tvb(3, 1):uint()] ~= nil
end

function ltp.dissector(tvb, pinfo, root)
    local tree = begin(ltp, "LTP", LTP_HDR, tvb, pinfo, root)
    if not tree then return 0 end
    local size = tvb:reported_len()
    local kind = tvb(3, 1):uint()
    local flags = tvb(4, 1):uint()
    local mac = tvb(5, 1):uint()
    local trailer = (mac == 1 or mac == 2) and (LTP_VERSIONS[tvb(2, 1):uint()] or 16) or 0
    tree:add_le(f.magic, tvb(0, 2))
    tree:add(f.version, tvb(2, 1))
    tree:add(f.type, tvb(3, 1))
    local ft = tree:add(f.flags, tvb(4, 1))
    ft:add(f.critical, tvb(4, 1))
    ft:add(f.retransmit, tvb(4, 1))
    ft:add(f.pass_done, tvb(4, 1))
    ft:add(f.probe, tvb(4, 1))
    tree:add(f.mac_kind, tvb(5, 1))
    tree:add_le(f.sender, tvb(6, 2)):append_text(tvb(6, 2):le_uint() == LTP_PS_RANK
                                                 and " (the PS)" or "")
    tree:add_le(f.session, tvb(8, 4))
    if kind == 4 or kind == 5 then
        tree:add_le(f.nonce, tvb(12, 4))
    else
        tree:add_le(f.msg_id, tvb(12, 4))
    end
    tree:add_le(f.segment, tvb(16, 2))
    tree:add_le(f.critical_count, tvb(18, 2))
    local name = ltp_types[kind] or "?"
    local info = { string.format("%s from %s %s=%d seg=%d", name,
                                 tvb(6, 2):le_uint() == LTP_PS_RANK and "PS"
                                     or tostring(tvb(6, 2):le_uint()),
                                 (kind == 4 or kind == 5) and "nonce" or "msg",
                                 tvb(12, 4):le_uint(), tvb(16, 2):le_uint()) }
    if not ltp_macs[mac] then tree:add_proto_expert_info(e.bad, "unknown MAC kind") end
    if kind ~= 1 and flags ~= 0 then
        tree:add_proto_expert_info(e.bad, "flags on a datagram that is not DATA")
    end
    local need = ({ [1] = LTP_DATA_HDR, [2] = LTP_ACK_HDR, [3] = LTP_CLOSE })[kind] or LTP_HDR
    if size < need + trailer then
        tree:add_proto_expert_info(e.bad, string.format(
            "%d bytes, shorter than a %s (%d)", size, name, need + trailer))
    elseif kind == 1 then
        dissect_data(tvb, tree, size, trailer, info)
        if bit.band(flags, 0x02) ~= 0 then
            tree:add_proto_expert_info(e.retransmit)
            info[#info + 1] = "[retransmission]"
        end
        if bit.band(flags, 0x08) ~= 0 then tree:add_proto_expert_info(e.probe) end
    elseif kind == 2 then
        dissect_ack(tvb, tree, size, trailer, info)
    elseif kind == 3 then
        dissect_close(tvb, tree, size, trailer, info)
    elseif size ~= LTP_HDR + trailer then
        tree:add_proto_expert_info(e.bad, string.format("a %s of %d bytes", name, size))
    end
    if trailer > 0 and size >= LTP_HDR + trailer then
        local at = size - trailer
        if trailer == 16 and not add(tree, tvb, f.dgram_seq, at, 8) then
            not_captured(tree, tvb, "datagram number")
        end
        if not add(tree, tvb, f.mac, size - 8, 8) then not_captured(tree, tvb, "MAC tag") end
    end
    pinfo.cols.info = table.concat(info, " ")
    return tvb:len()
end

-- The peer multicast transport ------------------------------------------------------------

local LTPP_HDR = 24
local LTPP_TAG = 16               -- BLAKE2b-128 over every byte before it
local ltpp_kinds = { [1] = "DATA", [2] = "POLL", [3] = "STATUS", [4] = "CLOSE" }
local ltpp_tails = { [1] = 4, [2] = 4, [3] = 12, [4] = 2 }
local ltpp_macs = { [0] = "none", [1] = "BLAKE2b-128 tag" }

local ltpp = Proto("ltpp", "LTP peer multicast (ltp-testbed)")
local g = {
    magic = ProtoField.string("ltpp.magic", "Magic"),
    version = ProtoField.uint8("ltpp.version", "Version", base.DEC),
    kind = ProtoField.uint8("ltpp.kind", "Kind", base.DEC, ltpp_kinds),
    sender = ProtoField.uint16("ltpp.sender", "Sender rank", base.DEC),
    session = ProtoField.uint32("ltpp.session", "Session id", base.HEX),
    round = ProtoField.uint32("ltpp.round", "Round", base.DEC),
    mac_kind = ProtoField.uint8("ltpp.mac_kind", "MAC", base.DEC, ltpp_macs),
    zero = ProtoField.uint8("ltpp.zero", "Reserved", base.DEC),
    pseq = ProtoField.uint64("ltpp.pseq", "Datagram number", base.DEC),
    seq = ProtoField.uint16("ltpp.seq", "Datagram of the message", base.DEC),
    count = ProtoField.uint16("ltpp.count", "Datagrams in the message", base.DEC),
    pass = ProtoField.uint16("ltpp.pass", "Pass", base.DEC),
    target = ProtoField.uint16("ltpp.target", "Sender polled (target rank)", base.DEC),
    status_flags = ProtoField.uint8("ltpp.status_flags", "Status flags", base.HEX),
    closed = ProtoField.bool("ltpp.status_flags.closed", "Closed", 8, nil, 0x01),
    dropped = ProtoField.bool("ltpp.status_flags.dropped", "Dropped (below min_frac)", 8, nil,
                              0x02),
    have_floats = ProtoField.uint32("ltpp.have_floats", "Floats held", base.DEC),
    bitmap = ProtoField.bytes("ltpp.bitmap", "Bitmap of held datagrams"),
    payload = ProtoField.bytes("ltpp.payload", "Payload (float32)"),
    tag = ProtoField.bytes("ltpp.tag", "MAC tag (BLAKE2b-128)"),
}
ltpp.fields = g
local pe = {
    closed = ProtoExpert.new("ltpp.closed", "Receiver closed the round",
                             expert.group.SEQUENCE, expert.severity.NOTE),
    bad = ProtoExpert.new("ltpp.bad", "Not a valid datagram (a peer would count it malformed)",
                          expert.group.MALFORMED, expert.severity.ERROR),
}
ltpp.experts = { pe.closed, pe.bad }
ltpp.prefs.port = Pref.uint("UDP port", 0,
                            "Decode this UDP port as LTP peer multicast (0: heuristic only)")

local function ltpp_matches(tvb)
    if tvb:len() < 6 then return false end
    return tvb(0, 4):string() == "LTPp" and tvb(4, 1):uint() == 2
        and ltpp_kinds[tvb(5, 1):uint()] ~= nil
end

function ltpp.dissector(tvb, pinfo, root)
    local tree = begin(ltpp, "LTPp", LTPP_HDR, tvb, pinfo, root)
    if not tree then return 0 end
    local size = tvb:reported_len()
    local kind = tvb(5, 1):uint()
    local mac = tvb(16, 1):uint()
    local tag = (mac == 1) and LTPP_TAG or 0
    tree:add(g.magic, tvb(0, 4))
    tree:add(g.version, tvb(4, 1))
    tree:add(g.kind, tvb(5, 1))
    tree:add(g.sender, tvb(6, 2))
    tree:add(g.session, tvb(8, 4))
    tree:add(g.round, tvb(12, 4))
    tree:add(g.mac_kind, tvb(16, 1))
    tree:add(g.zero, tvb(17, 1))
    tree:add(g.pseq, tvb(18, 6), tvb(18, 2):uint64() * 4294967296 + tvb(20, 4):uint64())
    local name = ltpp_kinds[kind]
    local info = { string.format("%s from %d round=%d", name, tvb(6, 2):uint(),
                                 tvb(12, 4):uint()) }
    if not ltpp_macs[mac] or tvb(17, 1):uint() ~= 0 then
        tree:add_proto_expert_info(pe.bad, "unknown MAC kind or a non-zero reserved byte")
    end
    local body = LTPP_HDR + ltpp_tails[kind]
    local body_len = size - body - tag
    if body_len < 0 then
        tree:add_proto_expert_info(pe.bad, string.format("%d bytes, shorter than a %s", size,
                                                         name))
        pinfo.cols.info = table.concat(info, " ")
        return tvb:len()
    end
    if kind == 1 then
        add(tree, tvb, g.seq, 24, 2, true)
        add(tree, tvb, g.count, 26, 2, true)
        info[#info + 1] = string.format("seq=%s", tvb:len() >= 26 and tvb(24, 2):uint() or "?")
        if body_len % 4 ~= 0 then tree:add_proto_expert_info(pe.bad, "payload not float32s") end
    elseif kind == 2 then
        add(tree, tvb, g.pass, 24, 2, true)
        add(tree, tvb, g.count, 26, 2, true)
    elseif kind == 3 then
        add(tree, tvb, g.target, 24, 2, true)
        add(tree, tvb, g.pass, 26, 2, true)
        if 29 <= tvb:len() then
            local ft = tree:add(g.status_flags, tvb(28, 1))
            ft:add(g.closed, tvb(28, 1))
            ft:add(g.dropped, tvb(28, 1))
            if bit.band(tvb(28, 1):uint(), 0x01) ~= 0 then
                tree:add_proto_expert_info(pe.closed)
                info[#info + 1] = "closed"
            end
        end
        add(tree, tvb, g.zero, 29, 1, true)
        add(tree, tvb, g.count, 30, 2, true)
        add(tree, tvb, g.have_floats, 32, 4, true)
    else
        add(tree, tvb, g.count, 24, 2, true)
    end
    local held = math.min(body_len, tvb:len() - body)
    local field = (kind == 3) and g.bitmap or g.payload
    if body_len > 0 and held > 0 then tree:add(field, tvb(body, held)) end
    if held < body_len then
        not_captured(tree, tvb, string.format("%d body bytes", body_len - held))
    end
    if tag > 0 and not add(tree, tvb, g.tag, size - tag, tag, true) then
        not_captured(tree, tvb, "MAC tag")
    end
    pinfo.cols.info = table.concat(info, " ")
    return tvb:len()
end

-- Registration --------------------------------------------------------------------------

local function heuristic(proto, matches)
    return function(tvb, pinfo, tree)
        if not matches(tvb) then return false end
        proto.dissector(tvb, pinfo, tree)
        return true
    end
end
ltp:register_heuristic("udp", heuristic(ltp, ltp_matches))
ltpp:register_heuristic("udp", heuristic(ltpp, ltpp_matches))

local udp_port = DissectorTable.get("udp.port")
udp_port:add_for_decode_as(ltp)
udp_port:add_for_decode_as(ltpp)

local function port_pref(proto)
    local current = 0
    return function()
        if current ~= 0 then udp_port:remove(current, proto) end
        current = proto.prefs.port
        if current ~= 0 then udp_port:add(current, proto) end
    end
end
ltp.prefs_changed = port_pref(ltp)
ltpp.prefs_changed = port_pref(ltpp)
