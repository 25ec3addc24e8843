#!/bin/sh
# index_diff.sh: the peer index (src/ltp_index.c) changed nothing a caller can see. It builds the
# simulator with every core call hashed (tests/index_trace.c) and the random multi-peer workload
# (tests/index_diff.c) twice, against this core and against INDEX_OLD_CORE (a commit whose core
# walks every peer), runs both on the same seeded configurations and fails on the first that
# differs: the simulator's rows and the hash of every datagram, timeout and input result.
#
#   make -C transports/native index-diff [INDEX_OLD_CORE=94363d7] [INDEX_SEEDS=300]
#
# The simulator runs cover LTP, ltp-reliable and PLOT; uniform and Gilbert-Elliott loss; 8 to 500
# workers; push and bsp; the testbed's host lateness; the fair and serial schedules, with and
# without shared_link. The workload's seeds run with a monotonic clock, and half as many again
# with a caller whose clock now and then steps back.
set -e
BUILD=${BUILD:-build}
CC=${CC:-cc}
OLD=${INDEX_OLD_CORE:-94363d7}
SEEDS=${INDEX_SEEDS:-300}
STEPS=${INDEX_STEPS:-6000}
GE=../../topologies/impair/geloss
FLAGS="-std=c11 -O2"
RENAME="-Dltp_core_poll_tx=trace_poll_tx -Dltp_core_next_timeout=trace_next_timeout"
RENAME="$RENAME -Dltp_core_input=trace_input"
OUT=$BUILD/index-diff

# build ROOT NAME: the workload and the traced simulator of the core under ROOT
build() {
    core=$(ls "$1"/src/*.c | grep -v ltp_udp)
    sim=$(ls "$1"/sim/*.c | grep -v ltp_sim.c)
    inc="-I$1/include -I$1/src -I$1/sim -I$GE"
    $CC $FLAGS -I"$1"/include -I"$1"/src -o "$OUT/$2_workload" tests/index_diff.c $core -lm -lcrypto
    $CC $FLAGS $RENAME $inc -c -o "$OUT/$2_sim.o" "$1"/sim/ltp_sim.c
    $CC $FLAGS $inc -o "$OUT/$2_sim" "$OUT/$2_sim.o" tests/index_trace.c $sim $core -lm -lcrypto
}

rm -rf "$OUT" && mkdir -p "$OUT/old"
git archive "$OLD" -- include src sim | tar -x -C "$OUT/old"
build . new
build "$OUT/old" old

PLOT="401408:0.8,512:1,32768:0.983673,256:1,2560:0.998724,40:1"
B="--bytes 437544"
differ=0
while read name args; do   # (a line ending in \ goes on)
    for side in old new; do
        "$OUT/${side}_sim" $args > "$OUT/$name.$side.rows" 2> "$OUT/$name.$side.trace" || true
        # the host's figures (wall time, CPU per datagram) are not the run's
        host='ps_core_us_per_datagram|wall_s|events_per_s|peak_rss_mb'
        sed -E -i "s/\"($host)\": [0-9.e+-]+/\"\1\": -/g" "$OUT/$name.$side.rows"
    done
    if cmp -s "$OUT/$name.old.rows" "$OUT/$name.new.rows" &&
       cmp -s "$OUT/$name.old.trace" "$OUT/$name.new.trace"
    then echo "  same      simulator $name: $(cat "$OUT/$name.new.trace")"
    else echo "  DIFFERENT simulator $name"; differ=$((differ + 1))
    fi
done <<EOF
ltp-n8-loss $B --workers 8 --iterations 3 --queue-pkts 64 --seed 1 --rx-poll-us 20 --loss 0.02
ltp-n32-ge $B --workers 32 --iterations 2 --bottleneck-mbps 1000 --queue-pkts 256 --seed 2 \
    --rx-poll-us 20 --ge 0.0131578947,0.25,0,1
plot-n8-loss $B --workers 8 --iterations 3 --queue-pkts 64 --seed 3 --rx-poll-us 20 --loss 0.02 \
    --segments $PLOT
plot-n16-bsp $B --workers 16 --iterations 3 --scenario bsp --compute-us 2000 --update-us 1000 \
    --bottleneck-mbps 1000 --queue-pkts 64 --delay-us 500 --seed 4 --loss 0.01 --segments $PLOT
reliable-n16-testbed $B --workers 16 --iterations 2 --reliable 1 --queue-pkts 64 --delay-us 2000 \
    --seed 5 --loss 0.05 --wake-mean-us 1000 --rx-poll-us 1000 --burst-bytes 15000
ltp-n24-fair $B --workers 24 --iterations 2 --bottleneck-mbps 1000 --queue-pkts 128 --seed 6 \
    --rx-poll-us 20 --loss 0.02 --cfg peer_schedule=0
ltp-n24-own-flows $B --workers 24 --iterations 2 --bottleneck-mbps 1000 --queue-pkts 128 --seed \
    7 --rx-poll-us 20 --loss 0.02 --cfg shared_link=0
ltp-n64-10g $B --workers 64 --iterations 2 --bottleneck-mbps 10000 --queue-pkts 256 --seed 8 \
    --rx-poll-us 20 --loss 0.01
ltp-n12-heavy $B --workers 12 --iterations 2 --bottleneck-mbps 200 --queue-pkts 32 --delay-us \
    1000 --seed 9 --loss 0.1 --wake-mean-us 200 --cfg \
    max_wait_us=30000,ack_every=3,close_copies=3,hint_ttl_min_us=500
plot-n10-fair-noauth $B --workers 10 --iterations 2 --auth 0 --bottleneck-mbps 500 --queue-pkts \
    64 --seed 10 --rx-poll-us 20 --loss 0.03 --cfg peer_schedule=0,rate_hint=0 --segments $PLOT
ltp-n200-100g $B --workers 200 --iterations 1 --bottleneck-mbps 100000 --queue-pkts 256 --seed \
    11 --rx-poll-us 20
plot-n16-own-flows $B --workers 16 --iterations 2 --bottleneck-mbps 300 --queue-pkts 48 --seed \
    12 --rx-poll-us 0 --loss 0.04 --delay-us 300 --cfg shared_link=0,send_order=1 --segments \
    $PLOT
ltp-n40-fair-testbed $B --workers 40 --iterations 2 --bottleneck-mbps 1000 --queue-pkts 64 \
    --delay-us 1000 --seed 13 --loss 0.05 --wake-mean-us 300 --rx-poll-us 200 --burst-bytes \
    15000 --cfg peer_schedule=0,shared_link=0,max_wait_us=200000
plot-n30-fair-ge $B --workers 30 --iterations 2 --bottleneck-mbps 2000 --queue-pkts 100 --seed \
    14 --rx-poll-us 20 --ge 0.02,0.3,0.001,0.6 --cfg peer_schedule=0,ack_every=4 --segments \
    $PLOT
ltp-n500-10g $B --workers 500 --iterations 1 --bottleneck-mbps 10000 --queue-pkts 256 --seed 15 \
    --rx-poll-us 20 --loss 0.01
EOF

# seeds SEEDS: the workload on both cores, one line each, compared whole
for mode in monotonic back; do
    count=$SEEDS
    [ $mode = back ] && count=$((SEEDS / 2))
    arg=$([ $mode = back ] && echo back || true)
    : > "$OUT/workload.$mode.old"; : > "$OUT/workload.$mode.new"
    for seed in $(seq 1 "$count"); do
        "$OUT/old_workload" "$seed" "$STEPS" $arg >> "$OUT/workload.$mode.old"
        "$OUT/new_workload" "$seed" "$STEPS" $arg >> "$OUT/workload.$mode.new"
    done
    if cmp -s "$OUT/workload.$mode.old" "$OUT/workload.$mode.new"
    then echo "  same      workload, $count seeds, clock $mode"
    else echo "  DIFFERENT workload, clock $mode:"
         diff "$OUT/workload.$mode.old" "$OUT/workload.$mode.new" | head -5
         differ=$((differ + 1))
    fi
done
if [ $differ -gt 0 ]; then echo "index-diff: $differ differ from $OLD"; exit 1; fi
echo "index-diff: every run the same as on $OLD"
