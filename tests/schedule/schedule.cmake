# The schedule of the tests that boot guests (labels integration, e2e,
# conformance), which `make test` runs two at a time (ctest -LE unit -j 2):
# which must run alone, which must not run beside each other, and what each
# costs, so the costliest start first. Read by CTest after every test is
# defined (tests/schedule/CMakeLists.txt); a name that no longer exists is
# ignored, so check names here when renaming a test.
#
# Why two at a time pays: measured on a 2-core machine under TCG (one run at
# -j 1, CPU sampled each second), a test uses 0.8 of the 2 cores on average;
# integration_gvisor runs at 0.5. The numbers in COST and the CPU list come
# from that run. (A test that mostly waits, like e2e_idle's 150 s idle, is
# labelled "light" where it is defined and runs in a lane of its own: Makefile.)
#
# Sharing is safe by construction for the rest: every daemon has its own
# registry and port, address leases and VMM uids are host-wide and locked,
# start-up sweeps leave what another live process is writing (core/manager.h
# SweepSnapshots, CleanupOrphans), and names of sandboxes, snapshots and
# networks are random.

# Alone (RUN_SERIAL): they assert something host-wide, change something
# every test shares, or hold a deadline that assumes an idle machine.
set(airlock_run_alone
  # Leak checks that count every run dir, VMM, netns and lease on the host
  # (tests/integration/harness.h SandboxResources, checkpoint_test.cc HostResources).
  LifecycleTest.TwentyCreateDestroyCyclesLeaveNothingBehind
  LifecycleTest.GuestThatNeverBecomesReadyIsCleanedUp
  LifecycleTest.HostileProgramsDoNotHurtTheHost
  LifecycleTest.CtrlCOfAirlockRunDestroysTheSandbox
  integration_gvisor_alone  # gVisor runs of the four above and the fork bomb below (tests/CMakeLists.txt)
  CheckpointTest.Kill9DuringCheckpointOrRollbackLeavesNothingBehind
  CheckpointTest.Kill9AtEachMomentOfARollbackLosesNothing
  CheckpointTest.FailedRollbackLeavesTheSandboxOrSaysItIsLost
  CheckpointTest.ConcurrentPauseRollbackAndKillAreSerialised
  # Shared state changed or measured: a tmpfs over snapshots/paused, the
  # lowest free VMM uid, the host's free disk, the host's free memory.
  SnapshotTest.DiskFullDuringPauseKeepsTheSandboxRunning
  JailTest.AdoptedJailedVmmPausesResumesAndFreesItsUid
  CheckpointTest.CheckpointOnALowDiskIs507AndTheSandboxRunsOn
  LimitsTest.DiskBelowTheReserveIsRefusedWith507
  LimitsTest.BurstOf30CreatesCompletesWithZeroFailures
  e2e_pool
  TenancyTest.Kill9WithAFullWarmPoolLeavesNothingAfterRestart
  GuestFreshnessTest.WarmPoolSandboxesShareNoTcpSecretsNorUrandom
  # Deadlines of a few seconds on guest or daemon timing.
  ServerTest.TokensTtlExpiryAndCleanup
  ServerTest.RoutingAuthAndErrorsWithoutSandboxes
  GuestUserTest.ForkBombStaysInItsCgroupAndIsKilled
  SnapshotTest.CreateFromTemplateSnapshotIsFreshAndPrivate
  EgressTest.LivePolicyUpdateClosesAndBlocks
  EgressTest.ResolverTcpFloodIsCappedPerSandbox
  TenancyTest.GuestPanicIsReportedDeadWithinSeconds
  # A gVisor checkpoint or pause of a sandbox with a client attached: beside
  # a busy suite it is refused in about 1 try in 3 (a connection to the
  # agent is open at every one of its 8 tries; docs/runtime-gvisor.md
  # "Known limits"). e2e_files_gvisor accepts that refusal.
  e2e_checkpoint_gvisor
  e2e_sdk_snapshots_gvisor
)

# One at a time among themselves (RESOURCE_LOCK), beside anything else.
# cpu: more than one core each on average (guest plus host work in
# parallel: 1.1 to 1.5 measured); two of them would starve each other's guests.
# (Not e2e_templates: 0.7 core, and its --build-timeout build has a 60 s
# deadline that runs beside its other cases, so it holds no tight deadline.
# Out of this lock it runs beside e2e_code_interpreter, not after it: the
# two costliest tests no longer queue one behind the other.)
set(airlock_lock_cpu
  e2e_code_interpreter e2e_files e2e_files_gvisor e2e_console e2e_desktop
  DataPlaneTest.GigabyteDownloadAndLargeUploadStreamWithBoundedMemory
  TemplatePackages.AptPipAndNpmThroughTheBuildAllowlistAndNothingElse
  RunTest.LargeOutputStreamsWithBoundedMemory
  integration_gvisor  # RunTest.LargeOutputStreamsWithBoundedMemory on gVisor among its cases
  LimitsTest.MaximaPerKeyCapTimeoutTreeMetricsAndOtlp
)
# host-memory: their outcome depends on the host's MemAvailable (admission,
# the pressure policy, several daemons' pools).
set(airlock_lock_memory
  LimitsTest.MemoryOvercommitIsRefusedAndSaysSo
  LimitsTest.MemoryPressureRefusesCreatesAndPausesTheIdleSandbox
  e2e_multinode e2e_code_interpreter e2e_code_interpreter_gvisor
  e2e_sdk_matrix  # code-interpreter sandboxes (2 GiB each) among its own
)
# team-names: named snapshots and the team disk budget are per team name
# across every daemon on the state dir, and these use the same team names.
set(airlock_lock_team_names
  TenancyTest.TeamDiskBudgetRefusesOnlyTheTeamOverItAndUploadsExpire
  TenancyTest.KeysOfAnotherTeamReachNothing
  TenancyTest.SnapshotNamesAndTemplateAliasesLiveInTheirTeamsNamespace
)

# Seconds at -j 1 (2 cores, TCG, Test build): CTest starts the costliest
# first. Its own measurements (Testing/Temporary/CTestCostData.txt) replace
# these after a run in the same build directory.
set(airlock_costs
  e2e_code_interpreter 234  e2e_templates 174  e2e_sdk_matrix 150  e2e_dataplane 40  e2e_files 80
  e2e_code_interpreter_gvisor 110  integration_gvisor 100  runtime_conformance 88
  e2e_template_oci 72  e2e_desktop 85  e2e_docker 60  DataPlaneTest.GigabyteDownloadAndLargeUploadStreamWithBoundedMemory 72
  e2e_sdk_snapshots_gvisor 47  e2e_pool 44  SnapshotTest.FiftyPauseResumeCyclesKeepEveryByte 42
  e2e_sdk_snapshots 38  e2e_files_gvisor 35  TemplatePackages.AptPipAndNpmThroughTheBuildAllowlistAndNothingElse 34
  EgressTest.RealSandboxesOnGvisor 29  e2e_multinode 27  RunTest.LargeOutputStreamsWithBoundedMemory 26
  EgressTest.GatewayHostAndOtherSandboxesClosedOnEveryPort 24 CheckpointTest.TwentyCheckpointRollbackCyclesLoseNothing 22
)

foreach(t IN LISTS airlock_run_alone)
  set_tests_properties(${t} PROPERTIES RUN_SERIAL TRUE)
endforeach()
set(airlock_locks "")
foreach(lock cpu memory team_names)
  foreach(t IN LISTS airlock_lock_${lock})
    list(APPEND airlock_locks_of_${t} ${lock})
    list(APPEND airlock_locked ${t})
  endforeach()
endforeach()
list(REMOVE_DUPLICATES airlock_locked)
foreach(t IN LISTS airlock_locked)
  set_tests_properties(${t} PROPERTIES RESOURCE_LOCK "${airlock_locks_of_${t}}")
endforeach()
list(LENGTH airlock_costs n)
while(n GREATER 1)
  list(POP_FRONT airlock_costs t cost)
  set_tests_properties(${t} PROPERTIES COST ${cost})
  list(LENGTH airlock_costs n)
endwhile()
