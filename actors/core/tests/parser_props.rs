//! Property tests for the core parsers that had none (issue 18): resource quantities,
//! requirements, Kubernetes versions, and budget schedules and durations. Every test name
//! contains `prop`, so `cargo nextest run -p karpenter-core -E 'test(/prop/)'` runs them.

use proptest::prelude::*;

/// Modest case counts keep the suite fast.
fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

mod quantity_props {
    use super::*;
    use karpenter_core::domain::resources::{
        CPU, EPHEMERAL_STORAGE, MEMORY, PODS, QuantityError, format_resource, parse_millis,
        parse_resource, parse_units,
    };

    /// Suffixes and their value as `(numerator, denominator)` of the multiplier, computed
    /// independently of the parser.
    fn suffix() -> impl Strategy<Value = (&'static str, i128, i128)> {
        prop::sample::select(vec![
            ("", 1, 1),
            ("m", 1, 1_000),
            ("u", 1, 1_000_000),
            ("n", 1, 1_000_000_000),
            ("k", 1_000, 1),
            ("M", 1_000_000, 1),
            ("G", 1_000_000_000, 1),
            ("T", 1_000_000_000_000, 1),
            ("Ki", 1 << 10, 1),
            ("Mi", 1 << 20, 1),
            ("Gi", 1 << 30, 1),
            ("Ti", 1 << 40, 1),
            ("e0", 1, 1),
            ("e3", 1_000, 1),
            ("E6", 1_000_000, 1),
            ("e+2", 100, 1),
            ("e-3", 1, 1_000),
        ])
    }

    fn ceil_div(numerator: i128, denominator: i128) -> i128 {
        // Both positive here.
        (numerator + denominator - 1) / denominator
    }

    /// Amounts `format_resource` writes, extremes included (uniform `i64`s rarely hit them).
    fn amount() -> impl Strategy<Value = i64> {
        prop_oneof![
            4 => any::<i64>(),
            2 => -1_000_000i64..1_000_000,
            1 => (-(1i64 << 20)..(1 << 20)).prop_map(|n| n << 30),
            1 => prop::sample::select(vec![i64::MIN, i64::MAX, i64::MIN + 1, 0, -1]),
        ]
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn prop_quantity_parsing_never_panics_on_any_string(value in any::<String>()) {
            let _ = parse_millis(&value);
            let _ = parse_units(&value);
        }

        #[test]
        fn prop_quantity_parsing_never_panics_on_quantity_like_strings(
            value in "[-+]?[0-9.]{0,45}([eE][-+]?[0-9]{0,12}|[KMGTPE]i|[numkMGTPE])?"
        ) {
            let _ = parse_millis(&value);
            let _ = parse_units(&value);
        }

        #[test]
        fn prop_quantity_without_digits_is_rejected_as_malformed(value in "[^0-9]{0,20}") {
            prop_assert!(
                matches!(parse_units(&value), Err(QuantityError::Malformed { .. })),
                "{value:?} was not rejected as malformed"
            );
        }

        #[test]
        fn prop_quantity_with_an_unknown_suffix_names_it(
            number in 0u32..100_000,
            suffix in "[a-zA-Z][a-zA-Z0-9]{0,4}".prop_filter("a known suffix", |s| {
                !matches!(
                    s.as_str(),
                    "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" | "n" | "u" | "m" | "k" | "M" | "G"
                        | "T" | "P" | "E"
                ) && !(s.len() > 1
                    && (s.starts_with('e') || s.starts_with('E'))
                    && s[1..].bytes().all(|b| b.is_ascii_digit()))
            })
        ) {
            let value = format!("{number}{suffix}");
            match parse_units(&value) {
                Err(QuantityError::UnknownSuffix { value: v, suffix: s }) => {
                    prop_assert_eq!(v, value);
                    prop_assert_eq!(s, suffix);
                }
                other => prop_assert!(false, "{value:?} gave {other:?}"),
            }
        }

        #[test]
        fn prop_canonical_quantity_parses_to_its_value(
            number in 0i64..10_000_000,
            (suffix, numerator, denominator) in suffix(),
            negative in any::<bool>(),
        ) {
            let sign = if negative && number != 0 { "-" } else { "" };
            let value = format!("{sign}{number}{suffix}");
            let exact_millis = i128::from(number) * numerator * 1_000;
            let exact_units = i128::from(number) * numerator;
            // Fractions round up (towards +infinity), as Kubernetes' Value()/MilliValue() do.
            let (millis, units) = if negative {
                (-(exact_millis / denominator), -(exact_units / denominator))
            } else {
                (ceil_div(exact_millis, denominator), ceil_div(exact_units, denominator))
            };
            // Out of an i64's range must be an error, never a wrapped value.
            for (parsed, expected) in [(parse_millis(&value), millis), (parse_units(&value), units)] {
                match i64::try_from(expected) {
                    Ok(expected) => prop_assert_eq!(parsed, Ok(expected), "{}", value),
                    Err(_) => prop_assert!(
                        matches!(parsed, Err(QuantityError::OutOfRange { .. })),
                        "{value}: {parsed:?}"
                    ),
                }
            }
        }

        #[test]
        fn prop_decimal_quantity_parses_to_its_value(
            whole in 0i64..1_000_000,
            fraction in "[0-9]{1,6}",
        ) {
            let value = format!("{whole}.{fraction}");
            let scale = 10i128.pow(u32::try_from(fraction.len()).unwrap());
            let exact = i128::from(whole) * scale + fraction.parse::<i128>().unwrap();
            prop_assert_eq!(
                i128::from(parse_millis(&value).unwrap()),
                ceil_div(exact * 1_000, scale),
                "{}", value
            );
            prop_assert_eq!(
                i128::from(parse_units(&value).unwrap()),
                ceil_div(exact, scale),
                "{}", value
            );
        }

        #[test]
        fn prop_formatted_quantity_parses_back_to_the_amount(
            resource in prop::sample::select(vec![CPU, MEMORY, EPHEMERAL_STORAGE, PODS, "nvidia.com/gpu"]),
            amount in amount(),
        ) {
            let text = format_resource(resource, amount);
            prop_assert_eq!(parse_resource(resource, &text), Ok(amount), "{} {:?}", resource, text);
        }
    }
}

mod requirement_props {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSelectorRequirement;
    use karpenter_core::domain::requirements::{
        AllowUndefined, Operator, Requirement, RequirementError, Requirements,
        from_node_selector_requirement,
    };

    const OPERATORS: [Operator; 6] = [
        Operator::In,
        Operator::NotIn,
        Operator::Exists,
        Operator::DoesNotExist,
        Operator::Gt,
        Operator::Lt,
    ];

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("topology.kubernetes.io/zone".to_owned()),
            Just("node.kubernetes.io/instance-type".to_owned()),
            Just("karpenter.sh/capacity-type".to_owned()),
            Just("failure-domain.beta.kubernetes.io/zone".to_owned()),
            "[a-z]{1,8}(\\.[a-z]{1,5}/)?[a-z0-9-]{1,8}",
        ]
    }

    fn values() -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec(
            prop_oneof!["[a-z0-9-]{0,6}", "-?[0-9]{1,20}", any::<String>()],
            0..5,
        )
    }

    fn single(requirement: Requirement) -> Requirements {
        Requirements::from_requirements([requirement])
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn prop_any_operator_and_values_never_panic(
            key in key(),
            operator in "(In|NotIn|Exists|DoesNotExist|Gt|Lt|[A-Za-z]{0,8})",
            values in prop::option::of(values()),
        ) {
            let api = NodeSelectorRequirement {
                key: key.clone(),
                operator: operator.clone(),
                values: values.clone(),
            };
            match from_node_selector_requirement(&api) {
                Ok(requirement) => {
                    // Everything a requirement offers must work on whatever was accepted.
                    let _ = requirement.to_string();
                    let _ = requirement.to_api();
                    let _ = requirement.len();
                    let _ = requirement.intersection(&requirement);
                    let set = single(requirement);
                    let _ = set.compatible(&set, AllowUndefined::WellKnown);
                    let _ = set.labels(7);
                }
                Err(RequirementError::UnknownOperator { key: k, operator: o }) => {
                    prop_assert!(!matches!(
                        operator.as_str(),
                        "In" | "NotIn" | "Exists" | "DoesNotExist" | "Gt" | "Lt"
                    ));
                    prop_assert_eq!(k, key);
                    prop_assert_eq!(o, operator);
                }
                Err(RequirementError::NotAnInteger { values: v, .. }) => {
                    prop_assert!(operator == "Gt" || operator == "Lt", "{}", operator);
                    let values = values.unwrap_or_default();
                    prop_assert!(values.len() != 1 || values[0].parse::<i64>().is_err());
                    prop_assert_eq!(v, values);
                }
                Err(other) => prop_assert!(false, "unexpected {other:?}"),
            }
        }

        #[test]
        fn prop_gt_and_lt_accept_exactly_one_integer(
            key in key(),
            bound in any::<i64>(),
            less in any::<bool>(),
        ) {
            let operator = if less { Operator::Lt } else { Operator::Gt };
            let requirement = Requirement::new(&key, operator, &[bound.to_string()]).unwrap();
            if less {
                prop_assert_eq!(requirement.less_than(), Some(bound));
            } else {
                prop_assert_eq!(requirement.greater_than(), Some(bound));
            }
            prop_assert!(Requirement::new(&key, operator, &[bound.to_string(), "1".to_owned()]).is_err());
        }

        #[test]
        fn prop_an_accepted_requirement_is_compatible_with_itself(
            key in key(),
            operator in prop::sample::select(OPERATORS.to_vec()),
            values in prop::collection::vec("[a-z0-9-]{1,6}", 1..5),
            bound in -1_000_000i64..1_000_000,
        ) {
            let values = match operator {
                Operator::Gt | Operator::Lt => vec![bound.to_string()],
                _ => values,
            };
            let requirement = Requirement::new(&key, operator, &values).unwrap();
            let set = single(requirement);
            prop_assert!(set.intersects(&set).is_ok(), "{:?}", set);
            prop_assert!(set.is_compatible(&set, AllowUndefined::None), "{:?}", set);
            prop_assert_eq!(set.compatible(&set, AllowUndefined::None), Ok(()));
        }

        #[test]
        fn prop_in_values_and_not_in_the_same_values_are_incompatible(
            key in key(),
            values in prop::collection::vec("[a-z0-9-]{1,6}", 1..5),
        ) {
            let within = single(Requirement::new(&key, Operator::In, &values).unwrap());
            let outside = single(Requirement::new(&key, Operator::NotIn, &values).unwrap());
            prop_assert!(within.intersects(&outside).is_err());
            prop_assert!(outside.intersects(&within).is_err());
            prop_assert!(!within.is_compatible(&outside, AllowUndefined::None));
            prop_assert!(!outside.is_compatible(&within, AllowUndefined::WellKnown));
        }
    }
}

mod version_props {
    use super::*;
    use karpenter_core::domain::version::{
        KubernetesVersion, MAX_TESTED, MIN_SUPPORTED, VersionError, VersionVerdict, check,
    };

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn prop_version_parsing_never_panics(value in any::<String>()) {
            if let Ok(version) = KubernetesVersion::parse(&value) {
                let _ = check(version);
            }
        }

        #[test]
        fn prop_major_minor_round_trips_through_display(major in any::<u32>(), minor in any::<u32>()) {
            let version = KubernetesVersion { major, minor };
            prop_assert_eq!(KubernetesVersion::parse(&version.to_string()), Ok(version));
        }

        #[test]
        fn prop_git_versions_parse_to_major_minor(
            major in 0u32..100,
            minor in 0u32..1000,
            patch in 0u32..1000,
            suffix in "(-eks-[0-9a-f]{7}|-gke\\.[0-9]{1,4}|\\+k3s1|)",
            v in any::<bool>(),
        ) {
            let value = format!("{}{major}.{minor}.{patch}{suffix}", if v { "v" } else { "" });
            prop_assert_eq!(
                KubernetesVersion::parse(&value),
                Ok(KubernetesVersion { major, minor }),
                "{}", value
            );
        }

        #[test]
        fn prop_strings_without_a_digit_are_unparseable(value in "[^0-9]{0,20}") {
            prop_assert_eq!(
                KubernetesVersion::parse(&value),
                Err(VersionError::Unparseable { value: value.clone() })
            );
        }

        #[test]
        fn prop_check_follows_the_supported_range(major in 0u32..4, minor in 0u32..60) {
            let version = KubernetesVersion { major, minor };
            match check(version) {
                Err(VersionError::TooOld { version: v, minimum }) => {
                    prop_assert!(version < MIN_SUPPORTED);
                    prop_assert_eq!(v, version);
                    prop_assert_eq!(minimum, MIN_SUPPORTED);
                }
                Ok(VersionVerdict::NewerThanTested(v)) => {
                    prop_assert!(version > MAX_TESTED);
                    prop_assert_eq!(v, version);
                }
                Ok(VersionVerdict::Supported(v)) => {
                    prop_assert!(MIN_SUPPORTED <= version && version <= MAX_TESTED);
                    prop_assert_eq!(v, version);
                }
                Err(other) => prop_assert!(false, "unexpected {other:?}"),
            }
        }
    }
}

mod schedule_props {
    use super::*;
    use k8s_openapi::jiff::{Timestamp, tz::TimeZone};
    use karpenter_core::apis::duration::{format_duration, parse as parse_duration};
    use karpenter_core::apis::nodepool::Budget;
    use karpenter_core::domain::disruption::budgets::{BudgetError, is_active};
    use karpenter_core::domain::disruption::cron::CronSchedule;

    /// Any instant jiff can represent.
    fn timestamp() -> impl Strategy<Value = Timestamp> {
        (
            Timestamp::MIN.as_second()..=Timestamp::MAX.as_second(),
            0i32..1_000_000_000,
        )
            .prop_filter_map("not representable", |(second, nanos)| {
                Timestamp::new(second, nanos)
                    .or_else(|_| Timestamp::from_second(second))
                    .ok()
            })
    }

    /// Instants of this era, where schedules have a next time within five years.
    fn recent() -> impl Strategy<Value = Timestamp> {
        (0i64..4_102_444_800).prop_filter_map("not representable", |second| {
            Timestamp::from_second(second).ok()
        })
    }

    fn cron_field() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("*".to_owned()),
            Just("?".to_owned()),
            "[0-9]{1,2}",
            "[0-9]{1,2}-[0-9]{1,2}",
            "(\\*|[0-9]{1,2}(-[0-9]{1,2})?)/[0-9]{1,2}",
            "[0-9]{1,2}(,[0-9]{1,2}){1,3}",
            "(jan|feb|dec|mon|sun|sat|MON|foo)(-(fri|nov))?",
            "[-*?/,0-9a-zA-Z]{0,6}",
        ]
    }

    fn descriptor() -> impl Strategy<Value = &'static str> {
        prop::sample::select(vec![
            "@yearly",
            "@annually",
            "@monthly",
            "@weekly",
            "@daily",
            "@midnight",
            "@hourly",
        ])
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn prop_schedule_parsing_never_panics_on_any_string(schedule in any::<String>()) {
            if let Ok(parsed) = CronSchedule::parse(&schedule) {
                let _ = parsed.next_after(Timestamp::UNIX_EPOCH);
            }
        }

        #[test]
        fn prop_accepted_schedules_evaluate_at_any_time_without_panicking(
            fields in prop::collection::vec(cron_field(), 5),
            at in timestamp(),
        ) {
            let schedule = fields.join(" ");
            if let Ok(parsed) = CronSchedule::parse(&schedule)
                && let Some(next) = parsed.next_after(at)
            {
                prop_assert!(next > at, "{} after {} gave {}", schedule, at, next);
                prop_assert_eq!(next.subsec_nanosecond(), 0);
            }
        }

        #[test]
        fn prop_minute_and_hour_schedules_fire_at_that_minute_and_hour(
            minute in 0u32..60,
            hour in 0u32..24,
            at in recent(),
        ) {
            let parsed = CronSchedule::parse(&format!("{minute} {hour} * * *")).unwrap();
            let next = parsed.next_after(at).unwrap();
            let civil = next.to_zoned(TimeZone::UTC);
            prop_assert_eq!(
                (u32::try_from(civil.minute()).unwrap(), u32::try_from(civil.hour()).unwrap(), civil.second()),
                (minute, hour, 0)
            );
            prop_assert!(next > at);
            prop_assert!(next.as_second() - at.as_second() <= 86_400);
        }

        #[test]
        fn prop_descriptors_are_accepted_and_fire_on_the_hour(
            descriptor in descriptor(),
            padding in "[ \t]{0,2}",
            at in recent(),
        ) {
            let parsed = CronSchedule::parse(&format!("{padding}{descriptor}{padding}")).unwrap();
            let next = parsed.next_after(at).unwrap().to_zoned(TimeZone::UTC);
            prop_assert_eq!((next.minute(), next.second()), (0, 0));
            if descriptor != "@hourly" {
                prop_assert_eq!(next.hour(), 0, "{}", descriptor);
            }
            let upper = descriptor.to_uppercase();
            prop_assert!(CronSchedule::parse(&upper).is_err(), "{}", upper);
        }

        #[test]
        fn prop_budget_schedule_errors_name_the_field(
            index in 0usize..10,
            schedule in "[a-z@ *0-9]{0,12}",
            at in recent(),
        ) {
            prop_assume!(CronSchedule::parse(&schedule).is_err());
            let budget = Budget {
                schedule: Some(schedule.clone()),
                duration: Some("1h".to_owned()),
                ..Budget::default()
            };
            let error = is_active(&budget, index, at).unwrap_err();
            prop_assert!(matches!(error, BudgetError::Schedule { .. }), "{:?}", error);
            let message = error.to_string();
            let field = format!("budgets[{index}].schedule");
            prop_assert!(message.starts_with(&field), "{}", message);
            prop_assert!(message.contains(&format!("{schedule:?}")), "{}", message);
        }

        #[test]
        fn prop_budget_durations_never_panic_and_errors_name_the_field(
            duration in prop_oneof!["[0-9.]{0,6}(ns|us|ms|s|m|h|d)?([0-9]{1,3}[smh])?", any::<String>()],
            index in 0usize..10,
            at in recent(),
        ) {
            let budget = Budget {
                schedule: Some("@daily".to_owned()),
                duration: Some(duration.clone()),
                ..Budget::default()
            };
            match (parse_duration(&duration), is_active(&budget, index, at)) {
                (Ok(_), Ok(_)) => {}
                (Err(_), Err(error @ BudgetError::Duration { .. })) => {
                    let message = error.to_string();
                    let field = format!("budgets[{index}].duration");
                    prop_assert!(message.starts_with(&field), "{}", message);
                }
                (parsed, active) => prop_assert!(false, "{duration:?}: {parsed:?} vs {active:?}"),
            }
        }

        #[test]
        fn prop_formatted_budget_durations_parse_back(seconds in 0u64..10_000_000) {
            let duration = std::time::Duration::from_secs(seconds);
            let text = format_duration(duration);
            prop_assert_eq!(parse_duration(&text), Ok(duration), "{}", text);
        }
    }
}
