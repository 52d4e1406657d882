"""The consumer groups behind transactional offset commits, as of each commit.

A transactional offset commit (``sendOffsetsToTransaction``, KIP-447) is
written to the group's ``__consumer_offsets`` partition inside the producer's
transaction; while that transaction is open the group's offsets are pending
(``OffsetFetch`` with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT). Which
group it is and who was in it tells the operator which application to look at:

* the *group protocol*: ``classic`` (JoinGroup/SyncGroup, state in
  ``GroupMetadata`` records, :mod:`auditor.formats.consumer_offsets`) or the
  KIP-848 ``consumer`` protocol (heartbeat-driven, server-side assignment,
  state in ``ConsumerGroup*`` records, :mod:`auditor.formats.group_records`);
  ``share`` and ``streams`` groups keep their own records the same way;
* its *members* as of the commit: member id, client id and host, instance id,
  member epoch and the partitions assigned to the member.

Both come from the records of the same ``__consumer_offsets`` replica *before*
the commit's offset, as the group coordinator replays them when it loads the
partition (``GroupMetadataManager.replay`` of kafka-group-coordinator 4.3.1:
the newest record of a key wins, a tombstone removes it):

* the protocol is the kind of the newest group-level record of the group:
  ``GroupMetadata`` (classic) or ``ConsumerGroupMetadata`` /
  ``ShareGroupMetadata`` / ``StreamsGroupMetadata``; a tombstone (the group
  deleted) or no such record in the input leaves it unknown (null) — a
  compacted partition may have lost the records from before the commit, and
  the input is never taken to show more than it holds;
* a consumer-protocol group's members are the member ids whose newest
  ``ConsumerGroupMemberMetadata`` before the commit is not a tombstone, with
  their newest ``ConsumerGroupCurrentMemberAssignment`` (member epoch, assigned
  topic ids and partitions; topic ids named from the metadata log's
  ``TopicRecord`` when the input has it). A member whose record carries
  ``ClassicMemberMetadata`` speaks the classic protocol inside a consumer group
  (an upgraded group: ``ConsumerGroupMember.useClassicProtocol``);
* a classic group's members are those of its newest ``GroupMetadata`` value
  (their assignment is an opaque ``bytes`` field of the embedded protocol, not
  decoded here).
"""

from __future__ import annotations

from auditor.model.replica_key import REPLICA, join_replica

OFFSETS_TOPIC = "__consumer_offsets"
GROUP_LEVEL = {"ConsumerGroupMetadata": "consumer", "ShareGroupMetadata": "share", "StreamsGroupMetadata": "streams"}
MEMBER_METADATA = ("ConsumerGroupMemberMetadata", "ShareGroupMemberMetadata", "StreamsGroupMemberMetadata")
CURRENT_ASSIGNMENT = ("ConsumerGroupCurrentMemberAssignment", "ShareGroupCurrentMemberAssignment",
                      "StreamsGroupCurrentMemberAssignment")

#: what :func:`offset_commit_groups` returns per open transaction and group
COMMIT_GROUP_COLUMNS = (*REPLICA, "producer_id", "first_offset", "group_id", "commit_offset", "committed",
                        "group_protocol", "members")
MEMBER_SCHEMA = ("struct<member_id:string,instance_id:string,client_id:string,client_host:string,member_epoch:int,"
                 "protocol:string,assigned_partitions:array<string>>")
COMMIT_GROUP_SCHEMA = (f"cluster_id string, broker_id int, log_dir string, topic string, partition int, producer_id bigint, "
                       f"first_offset bigint, group_id string, commit_offset bigint, committed array<string>, "
                       f"group_protocol string, members array<{MEMBER_SCHEMA}>")
_GROUP_KEY = [*REPLICA, "group_id"]


def topic_names(metadata_records):
    """(cluster_id, topic_id, topic_name) of every ``TopicRecord`` in the metadata log."""
    return (metadata_records.where("record_type = 'TOPIC_RECORD' AND topic_id IS NOT NULL")
            .select("cluster_id", "topic_id", "topic_name").dropDuplicates(["cluster_id", "topic_id"]))


def _newest_before(rows, commits, key: list[str], order: str = "offset"):
    """Per commit (``_GROUP_KEY`` + ``commit_offset``) and ``key``: the newest of ``rows`` before the commit."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # the commits are few (open transactions on __consumer_offsets only): broadcast them to the records
    small = F.broadcast(commits.select(*_GROUP_KEY, "commit_offset").distinct())
    j = join_replica(rows, small, on=["group_id"]).where(F.col(order) < F.col("commit_offset"))
    w = Window.partitionBy(*_GROUP_KEY, "commit_offset", *key).orderBy(F.col(order).desc())
    return j.withColumn("_n", F.row_number().over(w)).where("_n = 1").drop("_n")


def offset_commit_groups(open_transactions, offset_commits, group_records=None, group_metadata=None, names=None):
    """One row per open transaction on a ``__consumer_offsets`` replica and group it commits offsets for
    (:data:`COMMIT_GROUP_COLUMNS`): ``commit_offset`` (the group's first commit in the transaction),
    ``committed`` (``topic-partition@offset``), ``group_protocol`` (classic, consumer, share, streams;
    null when the input holds no live group record before the commit) and ``members``
    (:data:`MEMBER_SCHEMA`, as of the commit). ``group_records`` / ``group_metadata`` / ``names``
    (:func:`topic_names`) may be None when the input has none."""
    from pyspark.sql import functions as F

    txns = open_transactions.where(F.col("topic") == OFFSETS_TOPIC).select(*REPLICA, "producer_id", "first_offset")
    oc = offset_commits.where("batch_is_transactional AND NOT is_tombstone").select(
        "cluster_id", "broker_id", "log_dir", F.col("log_topic").alias("topic"), F.col("log_partition").alias("partition"),
        F.col("batch_producer_id").alias("producer_id"), F.col("offset").alias("commit_offset"), "group_id",
        F.concat(F.col("topic"), F.lit("-"), F.col("partition").cast("string"), F.lit("@"),
                 F.col("committed_offset").cast("string")).alias("_committed"))
    keys = [*REPLICA, "producer_id"]
    commits = (join_replica(oc, F.broadcast(txns), on=["producer_id"]).where(F.col("commit_offset") >= F.col("first_offset"))
               .groupBy(*keys, "first_offset", "group_id")
               .agg(F.min("commit_offset").alias("commit_offset"), F.sort_array(F.collect_set("_committed")).alias("committed")))

    marks = []
    if group_metadata is not None:
        marks.append(group_metadata.select(*_GROUP_KEY, "offset", "is_tombstone", F.lit("classic").alias("protocol")))
    if group_records is not None:
        gl = F.create_map(*[x for k, v in GROUP_LEVEL.items() for x in (F.lit(k), F.lit(v))])
        marks.append(group_records.where(F.col("record_type").isin(list(GROUP_LEVEL)))
                     .select(*_GROUP_KEY, "offset", "is_tombstone", gl[F.col("record_type")].alias("protocol")))
    if marks:
        m = marks[0] if len(marks) == 1 else marks[0].unionByName(marks[1])
        latest = _newest_before(m, commits, []).select(
            *_GROUP_KEY, "commit_offset", F.when(~F.col("is_tombstone"), F.col("protocol")).alias("group_protocol"))
        commits = join_replica(commits, latest, "left", on=["group_id", "commit_offset"])
    else:
        commits = commits.withColumn("group_protocol", F.lit(None).cast("string"))

    members = [_classic_members(commits, group_metadata)] if group_metadata is not None else []
    if group_records is not None:
        members.append(_modern_members(commits, group_records, names))
    if not members:
        return commits.withColumn("members", F.array().cast(f"array<{MEMBER_SCHEMA}>")).select(*COMMIT_GROUP_COLUMNS)
    mem = members[0] if len(members) == 1 else members[0].unionByName(members[1])
    per = mem.groupBy(*_GROUP_KEY, "commit_offset", F.col("source").alias("_source")).agg(
        F.sort_array(F.collect_list("member")).alias("members"))
    # the members of the protocol the group had at the commit (a group converted between the classic and
    # the consumer protocol has records of both kinds before it); none when the protocol is unknown
    src = F.when(F.col("group_protocol") == "classic", "classic").when(F.col("group_protocol").isNotNull(), "modern")
    out = join_replica(commits.withColumn("_source", src), per, "left", on=["group_id", "commit_offset", "_source"])
    out = out.withColumn("members", F.coalesce("members", F.array().cast(f"array<{MEMBER_SCHEMA}>")))
    return out.select(*COMMIT_GROUP_COLUMNS)


def _classic_members(commits, group_metadata):
    """Members of the newest classic ``GroupMetadata`` of the group before each commit."""
    from pyspark.sql import functions as F

    gm = _newest_before(group_metadata.select(*_GROUP_KEY, "offset", "is_tombstone", "members"), commits, [])
    m = gm.where("NOT is_tombstone").select(*_GROUP_KEY, "commit_offset", F.explode("members").alias("m"))
    return m.select(*_GROUP_KEY, "commit_offset", F.lit("classic").alias("source"), F.struct(
        F.col("m.member_id").alias("member_id"), F.col("m.group_instance_id").alias("instance_id"),
        F.col("m.client_id").alias("client_id"), F.col("m.client_host").alias("client_host"),
        F.lit(None).cast("int").alias("member_epoch"), F.lit("classic").alias("protocol"),
        F.lit(None).cast("array<string>").alias("assigned_partitions")).alias("member"))


def _modern_members(commits, group_records, names):
    """Members of a consumer/share/streams group before each commit: newest member metadata (not a
    tombstone) with the newest current assignment of the member."""
    from pyspark.sql import functions as F

    md = _newest_before(group_records.where(F.col("record_type").isin(list(MEMBER_METADATA))).select(
        *_GROUP_KEY, "offset", "member_id", "is_tombstone", "instance_id", "client_id", "client_host",
        "classic_protocols"), commits, ["member_id"]).where("NOT is_tombstone")
    ca = _newest_before(group_records.where(F.col("record_type").isin(list(CURRENT_ASSIGNMENT))).select(
        *_GROUP_KEY, "offset", "member_id", "is_tombstone", "member_epoch", "assigned_partitions"),
        commits, ["member_id"]).where("NOT is_tombstone")
    k = [*_GROUP_KEY, "commit_offset", "member_id"]
    parts = ca.select(*k, F.explode_outer("assigned_partitions").alias("tp")).select(
        *k, F.col("tp.topic_id").alias("topic_id"), F.explode_outer("tp.partitions").alias("p"))
    if names is not None:
        parts = parts.join(F.broadcast(names), ["cluster_id", "topic_id"], "left")
    else:
        parts = parts.withColumn("topic_name", F.lit(None).cast("string"))
    parts = parts.where(F.col("topic_id").isNotNull()).groupBy(*k).agg(F.sort_array(F.collect_list(F.concat(
        F.coalesce("topic_name", "topic_id"), F.lit("-"), F.col("p").cast("string")))).alias("assigned_partitions"))
    on = ["group_id", "commit_offset", "member_id"]
    j = join_replica(join_replica(md, ca.select(*k, "member_epoch"), "left", on=on), parts, "left", on=on)
    return j.select(*_GROUP_KEY, "commit_offset", F.lit("modern").alias("source"), F.struct(
        "member_id", "instance_id", "client_id", "client_host", F.col("member_epoch").cast("int").alias("member_epoch"),
        F.when(F.col("classic_protocols").isNotNull(), F.lit("classic")).otherwise(F.lit("consumer")).alias("protocol"),
        F.coalesce("assigned_partitions", F.array().cast("array<string>")).alias("assigned_partitions")).alias("member"))


PROTOCOL_WORDS = {"consumer": "consumer protocol (KIP-848)", "classic": "classic protocol",
                  "share": "share group (KIP-932)", "streams": "streams protocol (KIP-1071)"}


def per_transaction(commit_groups):
    """Per open transaction (REPLICA, producer_id, first_offset): ``offset_commit_groups`` (each group
    with its protocol) and ``offset_commit_members`` (each member as of the commit), as text for
    the findings' evidence."""
    from pyspark.sql import functions as F

    words = F.create_map(*[x for k, v in PROTOCOL_WORDS.items() for x in (F.lit(k), F.lit(v))])
    group = F.concat(F.col("group_id"), F.lit(" ("), F.coalesce(
        words[F.col("group_protocol")], F.lit("group protocol unknown: no live group record before the commit in the input")),
        F.lit(", offsets "), F.concat_ws(", ", "committed"), F.lit(")"))
    member = F.transform("members", lambda m: F.concat(
        F.col("group_id"), F.lit(": member "), m["member_id"],
        F.lit(" (client "), F.coalesce(m["client_id"], F.lit("?")), F.lit(" on "), F.coalesce(m["client_host"], F.lit("?")),
        F.when(m["instance_id"].isNotNull() & (m["instance_id"] != ""), F.concat(F.lit(", instance "), m["instance_id"]))
        .otherwise(F.lit("")),
        F.when(m["protocol"] != F.col("group_protocol"), F.concat(F.lit(", "), m["protocol"], F.lit(" protocol")))
        .otherwise(F.lit("")),
        F.when(m["member_epoch"].isNotNull(), F.concat(F.lit(", member epoch "), m["member_epoch"].cast("string")))
        .otherwise(F.lit("")),
        F.when(m["assigned_partitions"].isNotNull(), F.concat(F.lit(", assigned "), F.when(
            F.size(m["assigned_partitions"]) > 0, F.concat_ws(" ", m["assigned_partitions"])).otherwise(F.lit("nothing"))))
        .otherwise(F.lit("")),
        F.lit(")")))
    return commit_groups.groupBy(*REPLICA, "producer_id", "first_offset").agg(
        F.sort_array(F.collect_list(group)).alias("offset_commit_groups"),
        F.sort_array(F.flatten(F.collect_list(member))).alias("offset_commit_members"))
