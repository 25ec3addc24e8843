/* test_timers.c: the timer floors follow the host (timer_floors_host), included by test_core.c.
 * docs/ltp-protocol.md §3 ("Loss detection") and §4 ("ACKs").
 *
 * The probe timeout's and RACK's floors and the ACK delay were constants sized for the testbed's
 * late threads (pto_min_us 500 us, reorder_window_min_us 100 us, ack_delay_us 200 us), a fifth of a
 * push at 100 Gbit/s. The core now measures how late its host runs it after the time
 * ltp_core_next_timeout named, and a punctual host brings the floors down to timer_floor_min_us;
 * a late one keeps the constants. The clock here is driven by hand: a worker joining repeats its
 * HELLO every hello_interval_us, so each round names a time and the test enters the core that
 * late after it.
 */

/* A worker core (option `opt` set to `value`, if any) joining the PS at *now. */
static ltp_core_t *timers_core(const char *opt, double value, uint64_t *now)
{
    ltp_config_t cfg;
    ltp_config_default(&cfg);
    ltp_config_set(&cfg, "auth", 0);
    if (opt) ltp_config_set(&cfg, opt, value);
    ltp_core_t *c = ltp_core_new(&cfg, 0);
    ltp_core_add_peer(c, 0xFFFF);
    ltp_core_hello(c, 0, *now);
    return c;
}

/* Enter c `late` us after each time it names, `rounds` times. */
static void timers_enter(ltp_core_t *c, uint64_t *now, uint64_t late, int rounds)
{
    uint8_t b[1600];
    int slot;
    for (int i = 0; i < rounds; i++) {
        while (ltp_core_poll_tx(c, *now, b, sizeof b, &slot) > 0) {}
        uint64_t due = ltp_core_next_timeout(c, *now);
        CHECK(due > *now && due != UINT64_MAX, "a joining worker named no time to run again");
        *now = due + late;
    }
    while (ltp_core_poll_tx(c, *now, b, sizeof b, &slot) > 0) {}
}

static void test_timer_floors(void)
{
    uint64_t now = 100000000;
    ltp_core_t *c = timers_core(NULL, 0, &now);
    /* Before 16 samples nothing is known: the fixed values. */
    timers_enter(c, &now, 0, 10);
    CHECK(host_floor(c, 500) == 500, "the floor followed the host after 10 samples: %.1f", host_floor(c, 500));
    /* A punctual host: timer_floor_min_us, and an ACK waits a quarter of the sender's srtt. */
    timers_enter(c, &now, 0, 10);
    CHECK(host_floor(c, 500) == 10, "a punctual host's floor is %.1f us, not 10", host_floor(c, 500));
    CHECK(ack_hold_us(c, 400) == 100, "an ACK waits %.1f us at srtt 400 us, not 100", ack_hold_us(c, 400));
    CHECK(ack_hold_us(c, 2000) == 200, "an ACK waits %.1f us at srtt 2 ms, not ack_delay_us", ack_hold_us(c, 2000));
    /* One wake-up 150 us late: the floor covers it for the window (1 s) ... */
    timers_enter(c, &now, 150, 1);
    timers_enter(c, &now, 0, 20);   /* 20 HELLO intervals: 0.4 s */
    CHECK(host_floor(c, 500) == 150, "the floor forgot a 150 us late wake-up within the window: %.1f",
          host_floor(c, 500));
    CHECK(ack_hold_us(c, 40) == 150, "an ACK waits %.1f us, under the host's floor", ack_hold_us(c, 40));
    /* ... and not after it. */
    timers_enter(c, &now, 0, 60);   /* 1.2 s */
    CHECK(host_floor(c, 500) == 10, "the floor kept a late wake-up past the window: %.1f", host_floor(c, 500));
    /* A late host keeps the fixed values. */
    timers_enter(c, &now, 2000, 3);
    CHECK(host_floor(c, 500) == 500 && host_floor(c, 100) == 100 && ack_hold_us(c, 40) == 200,
          "a host 2 ms late left the fixed values: %.1f, %.1f, %.1f", host_floor(c, 500), host_floor(c, 100),
          ack_hold_us(c, 40));
    ltp_core_free(c);

    /* A datagram in before the named time measures nothing. */
    now = 100000000;
    c = timers_core(NULL, 0, &now);
    timers_enter(c, &now, 0, 20);
    uint64_t due = ltp_core_next_timeout(c, now);
    uint8_t junk[8] = {0};
    ltp_core_input(c, 0, junk, sizeof junk, due - 1000);
    CHECK(c->due_us == due, "an entry before the named time took it as measured");
    ltp_core_input(c, 0, junk, sizeof junk, due + 300);
    CHECK(host_floor(c, 500) == 300 && c->due_us == UINT64_MAX,
          "the first entry 300 us after the named time measured %.1f us", host_floor(c, 500));
    ltp_core_free(c);

    /* timer_floors_host off: the fixed values on a punctual host. */
    now = 100000000;
    c = timers_core("timer_floors_host", 0, &now);
    timers_enter(c, &now, 0, 20);
    CHECK(host_floor(c, 500) == 500 && ack_hold_us(c, 40) == 200, "with timer_floors_host off the floors moved");
    ltp_core_free(c);
    printf("timer floors: a punctual host at timer_floor_min_us, a late one at the fixed values\n");
}
