-- Raw samples, one row per measurement, decoded from the samples table: the kernel's n
-- samples and the baseline's, with per-sample clocks and throttle flags.
CREATE VIEW raw_samples AS
SELECT measurement_id,
    times_ns[1:n] AS samples_ns,
    CASE WHEN cardinality(sm_clock_mhz) = 1 THEN array_fill(sm_clock_mhz[1], ARRAY[n])
         ELSE sm_clock_mhz END AS sm_clock_mhz,
    CASE WHEN cardinality(mem_clock_mhz) = 1 THEN array_fill(mem_clock_mhz[1], ARRAY[n])
         ELSE mem_clock_mhz END AS mem_clock_mhz,
    substring(throttled FROM 1 FOR n) AS throttled,
    times_ns[n + 1:cardinality(times_ns)] AS baseline_ns,
    substring(throttled FROM n + 1) AS baseline_throttled
FROM samples;
