#!/usr/bin/env node
// KafkaJS scenarios for compat_tests: `node scenarios.js HOST:PORT SCENARIO`.
// Prints one JSON line on stdout: {"ok": true, ...facts} or {"ok": false, "error": ..., "stack": ...};
// exits 1 on failure. Every wait is bounded (STEP_MS); topics and groups are unique per run.
'use strict'

const crypto = require('crypto')
const { Kafka, logLevel, CompressionTypes, ConfigResourceTypes } = require('kafkajs')

const STEP_MS = 20000
const PARTITIONS = 3

const [bootstrap, scenarioName] = process.argv.slice(2)
const kafka = new Kafka({
  clientId: 'compat-kafkajs',
  brokers: bootstrap.split(','), // a bootstrap list ("host:port,host:port") as every client takes it
  // KAFKAJS_LOG=1: KafkaJS's debug log on stderr (stdout carries only the JSON result)
  logLevel: process.env.KAFKAJS_LOG ? logLevel.DEBUG : logLevel.NOTHING,
  logCreator: () => ({ namespace, label, log }) => console.error(label, namespace, JSON.stringify(log)),
  connectionTimeout: 5000,
  requestTimeout: 15000,
  retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 2000 },
})

const unique = prefix => `compat-kafkajs-${prefix}-${crypto.randomBytes(5).toString('hex')}`

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`)
}

function checkEqual(got, want, what) {
  const [g, w] = [JSON.stringify(got), JSON.stringify(want)]
  if (g !== w) throw new Error(`${what}: got ${g}, want ${w}`)
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

async function within(ms, what, promise) {
  let timer
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms)
  })
  try {
    return await Promise.race([promise, timeout])
  } finally {
    clearTimeout(timer)
  }
}

async function withAdmin(fn) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    return await fn(admin)
  } finally {
    await admin.disconnect()
  }
}

async function createTopic(admin, topic, numPartitions = PARTITIONS) {
  const created = await admin.createTopics({
    topics: [{ topic, numPartitions, replicationFactor: 1 }],
    waitForLeaders: true,
    timeout: STEP_MS,
  })
  check(created === true, `createTopics(${topic}) returned ${created}`)
}

// Records over every partition: keyed (the first with a null key), headers with a repeated key and an
// empty value, increasing explicit CreateTime timestamps, values with text and arbitrary bytes.
// The same records as compat_tests.common.make_records(n, 3, tag, baseTs), so Python can re-read them.
function makeMessages(n, tag, baseTs = Date.now() - 60000) {
  const messages = []
  for (let i = 0; i < n; i++) {
    messages.push({
      partition: i % PARTITIONS,
      key: i === 0 ? null : `key-${tag}-${i}`,
      value: Buffer.concat([
        Buffer.from(`value ${i} of ${tag} `.repeat(1 + (i % 7))),
        Buffer.from([...Array((i * 37) % 257).keys()]),
      ]),
      headers: { idx: `${i}`, dup: ['1', '2'], empty: '' },
      timestamp: `${baseTs + i * 3}`,
    })
  }
  return messages
}

const hex = b => (b == null ? null : Buffer.from(b).toString('hex'))

// The comparable form of a record, as sent or as read back (headers: name -> list of hex values).
function norm(partition, m) {
  const headers = {}
  for (const [k, v] of Object.entries(m.headers || {})) {
    headers[k] = (Array.isArray(v) ? v : [v]).map(hex)
  }
  return { partition, key: hex(m.key), value: hex(m.value), headers, timestamp: `${m.timestamp}` }
}

function sentByPartition(messages) {
  const parts = {}
  for (const m of messages) (parts[m.partition] ||= []).push(norm(m.partition, m))
  return parts
}

// Subscribe `groupId` to `topic` from the beginning and collect records until `until(records)` holds;
// the consumer stays running (the caller disconnects it). Resolves to { consumer, records }.
async function consumeUntil(groupId, topic, until, extra = {}) {
  const consumer = kafka.consumer({
    groupId,
    sessionTimeout: 10000,
    rebalanceTimeout: 10000,
    heartbeatInterval: 1000,
    maxWaitTimeInMs: 200,
    retry: { retries: 3 },
  })
  const records = []
  let done
  const finished = new Promise(resolve => (done = resolve))
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    ...extra,
    eachMessage: async ({ partition, message }) => {
      records.push({ partition, offset: Number(message.offset), message })
      if (until(records)) done()
    },
  })
  try {
    await within(STEP_MS, `consume ${topic} as ${groupId} (have ${records.length})`, finished)
  } catch (e) {
    await consumer.disconnect()
    throw e
  }
  return { consumer, records }
}

// Per partition, the records read (offset order, contiguous from 0) equal the records sent.
function compareRecords(messages, records) {
  const want = sentByPartition(messages)
  const got = {}
  const offsets = {}
  for (const r of [...records].sort((a, b) => a.partition - b.partition || a.offset - b.offset)) {
    ;(got[r.partition] ||= []).push(norm(r.partition, r.message))
    ;(offsets[r.partition] ||= []).push(r.offset)
  }
  checkEqual(Object.keys(got), Object.keys(want), 'partitions read')
  for (const p of Object.keys(want)) {
    checkEqual(offsets[p], [...want[p].keys()], `partition ${p} offsets`)
    for (let i = 0; i < want[p].length; i++) {
      checkEqual(got[p][i], want[p][i], `partition ${p} record ${i}`)
    }
  }
}

async function produce(messages, topic, opts = {}, compression = CompressionTypes.None) {
  const producer = kafka.producer({ allowAutoTopicCreation: false, ...opts })
  await producer.connect()
  try {
    const results = []
    for (let i = 0; i < messages.length; i += 10) {
      const res = await producer.send({
        topic,
        acks: -1,
        compression,
        messages: messages.slice(i, i + 10),
      })
      results.push(...res)
    }
    for (const r of results) check(r.errorCode === 0, `produce result ${JSON.stringify(r)}`)
    return results
  } finally {
    await producer.disconnect()
  }
}

async function roundtrip(compression, tag) {
  const topic = unique(tag)
  await withAdmin(admin => createTopic(admin, topic))
  const baseTs = Date.now() - 60000
  const messages = makeMessages(30, tag, baseTs)
  await produce(messages, topic, {}, compression)
  const { consumer, records } = await consumeUntil(
    unique(`${tag}-g`),
    topic,
    recs => recs.length >= messages.length
  )
  await consumer.disconnect()
  check(records.length === messages.length, `read ${records.length}, sent ${messages.length}`)
  compareRecords(messages, records)
  return { topic, tag, baseTs, records: records.length }
}

const scenarios = {
  // keyed records with headers and timestamps round trip through a group; commits are honoured
  // by a second consumer of the same group.
  async 'produce-consume-group'() {
    const topic = unique('group')
    const groupId = unique('group-g')
    await withAdmin(admin => createTopic(admin, topic))
    const messages = makeMessages(30, 'group')
    await produce(messages, topic)

    const first = await consumeUntil(groupId, topic, recs => recs.length >= messages.length)
    const { consumer, records } = first
    const commits = []
    for (let p = 0; p < PARTITIONS; p++) {
      const last = Math.max(...records.filter(r => r.partition === p).map(r => r.offset))
      commits.push({ topic, partition: p, offset: `${last + 1}` })
    }
    await consumer.commitOffsets(commits)
    await consumer.disconnect()
    check(records.length === messages.length, `read ${records.length}, sent ${messages.length}`)
    compareRecords(messages, records)

    const committed = await withAdmin(admin => admin.fetchOffsets({ groupId, topics: [topic] }))
    const committedOffsets = committed[0].partitions
      .map(p => [p.partition, Number(p.offset)])
      .sort((a, b) => a[0] - b[0])
    checkEqual(
      committedOffsets,
      commits.map(c => [c.partition, Number(c.offset)]),
      'fetchOffsets after commit'
    )

    // A second member of the group resumes from the commits: once it has joined, a new record is
    // the only one it sees.
    const second = kafka.consumer({ groupId, sessionTimeout: 10000, rebalanceTimeout: 10000,
      heartbeatInterval: 1000, maxWaitTimeInMs: 200 })  // prettier-ignore
    const seen = []
    let joined
    const joinedP = new Promise(resolve => (joined = resolve))
    second.on(second.events.GROUP_JOIN, e => joined(e))
    await second.connect()
    try {
      await second.subscribe({ topics: [topic], fromBeginning: true })
      await second.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          seen.push({ partition, offset: Number(message.offset), key: `${message.key}` })
        },
      })
      const join = await within(STEP_MS, 'second consumer joins the group', joinedP)
      await produce([{ partition: 1, key: 'late', value: 'after the commits' }], topic)
      const deadline = Date.now() + STEP_MS
      while (seen.length === 0 && Date.now() < deadline) await sleep(100)
      await sleep(500) // anything old would arrive with or before the new record
      const want = [{ partition: 1, offset: Number(commits[1].offset), key: 'late' }]
      checkEqual(seen, want, 'second consumer read')
      return { topic, groupId, records: records.length, committed: committedOffsets,
        secondMemberAssignment: join.payload.memberAssignment }  // prettier-ignore
    } finally {
      await second.disconnect()
    }
  },

  // a second member joins a running group: the partitions are split, the first member's auto-commits
  // hold across the rebalance, and every record is delivered to exactly one member exactly once.
  async 'group-rebalance'() {
    const topic = unique('rebal')
    const groupId = unique('rebal-g')
    await withAdmin(admin => createTopic(admin, topic, 4))
    const old = [...Array(40).keys()].map(i => ({ partition: i % 4, key: `old-${i}`, value: `${i}` }))
    await produce(old, topic)
    const seen = { a: [], b: [] }
    const assigned = {}
    const member = async name => {
      const c = kafka.consumer({ groupId, sessionTimeout: 10000, rebalanceTimeout: 10000,
        heartbeatInterval: 500, maxWaitTimeInMs: 200 })  // prettier-ignore
      c.on(c.events.GROUP_JOIN, e => (assigned[name] = e.payload.memberAssignment[topic]))
      await c.connect()
      await c.subscribe({ topics: [topic], fromBeginning: true })
      await c.run({
        autoCommitThreshold: 1,
        eachMessage: async ({ partition, message }) => {
          seen[name].push(`${partition}:${message.offset}:${message.key}`)
        },
      })
      return c
    }
    const waitFor = async (what, cond) => {
      const deadline = Date.now() + STEP_MS
      while (!cond() && Date.now() < deadline) await sleep(100)
      check(cond(), `${what} (seen ${JSON.stringify(seen)}, assigned ${JSON.stringify(assigned)})`)
    }
    const a = await member('a')
    let b
    try {
      await waitFor('member a reads the 40 old records', () => seen.a.length >= 40)
      b = await member('b')
      const split = () => assigned.a?.length === 2 && assigned.b?.length === 2
      await waitFor('both members get two partitions', split)
      const late = [...Array(8).keys()].map(i => ({ partition: i % 4, key: `late-${i}`, value: `${i}` }))
      await produce(late, topic)
      await waitFor('48 records delivered', () => seen.a.length + seen.b.length >= 48)
      await sleep(500) // a duplicate would show up right behind
      const all = [...seen.a, ...seen.b]
      check(new Set(all).size === all.length && all.length === 48, `duplicates: ${JSON.stringify(seen)}`)
      const lateOf = name =>
        seen[name].filter(r => r.includes(':late-')).map(r => Number(r.split(':')[0]))
      checkEqual([...new Set(lateOf('b'))].sort(), [...assigned.b].sort(), "member b's late partitions")
      checkEqual(seen.b.filter(r => r.includes(':old-')), [], 'old records re-read by member b')
      // a copy: disconnecting in `finally` rebalances again, and a GROUP_JOIN then would change it
      const split2 = { a: [...assigned.a], b: [...assigned.b] }
      return { topic, groupId, assigned: split2, a: seen.a.length, b: seen.b.length }
    } finally {
      await Promise.all([a.disconnect(), b?.disconnect()])
    }
  },

  async 'gzip-roundtrip'() {
    return roundtrip(CompressionTypes.GZIP, 'gzip')
  },

  async admin() {
    return withAdmin(async admin => {
      const topic = unique('admin')
      await createTopic(admin, topic)
      // creating it again is refused (createTopics resolves false only when *all* topics existed)
      let again = null
      try {
        again = await admin.createTopics({ topics: [{ topic, numPartitions: 1 }], timeout: STEP_MS })
      } catch (e) {
        again = e.type || `${e}`
      }
      check(again === false, `createTopics of an existing topic returned ${again}`)

      const listed = await admin.listTopics()
      check(listed.includes(topic), `listTopics lacks ${topic}: ${listed}`)

      const md = await admin.fetchTopicMetadata({ topics: [topic] })
      checkEqual(md.topics.map(t => t.name), [topic], 'fetchTopicMetadata topics')
      const parts = md.topics[0].partitions.sort((a, b) => a.partitionId - b.partitionId)
      checkEqual(parts.map(p => [p.partitionId, p.partitionErrorCode]), [[0, 0], [1, 0], [2, 0]],
        'fetchTopicMetadata partitions')  // prettier-ignore
      for (const p of parts) {
        check(p.leader >= 0 && p.replicas.includes(p.leader), `partition ${JSON.stringify(p)}`)
      }

      const baseTs = Date.now() - 60000
      const messages = makeMessages(12, 'admin', baseTs) // 4 per partition, ts base + 3i
      await produce(messages, topic)
      const offsets = (await admin.fetchTopicOffsets(topic))
        .map(o => [o.partition, o.low, o.high])
        .sort((a, b) => a[0] - b[0])
      checkEqual(offsets, [[0, '0', '4'], [1, '0', '4'], [2, '0', '4']], 'fetchTopicOffsets')

      // the first record at or after base + 3*4 is message 4 (partition 1, offset 1); partition 0
      // has message 6 (offset 2) and partition 2 message 5 (offset 1)
      const byTs = async ts =>
        (await admin.fetchTopicOffsetsByTimestamp(topic, ts))
          .map(o => [o.partition, o.offset])
          .sort((a, b) => a[0] - b[0])
      checkEqual(await byTs(baseTs + 12), [[0, '2'], [1, '1'], [2, '1']], 'offsets by timestamp')
      checkEqual(await byTs(baseTs - 1000), [[0, '0'], [1, '0'], [2, '0']], 'offsets by early ts')
      // past the last record: no offset from the broker, KafkaJS falls back to the high watermark
      checkEqual(await byTs(Date.now() + 3600000), [[0, '4'], [1, '4'], [2, '4']], 'offsets by late ts')

      const configs = await admin.describeConfigs({
        resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }],
        includeSynonyms: false,
      })
      checkEqual(configs.resources.map(r => [r.resourceName, r.errorCode]), [[topic, 0]],
        'describeConfigs resources')  // prettier-ignore
      const entries = Object.fromEntries(
        configs.resources[0].configEntries.map(e => [e.configName, e.configValue])
      )
      for (const name of ['cleanup.policy', 'retention.ms', 'max.message.bytes']) {
        check(name in entries, `describeConfigs lacks ${name}: ${Object.keys(entries)}`)
      }
      const some = await admin.describeConfigs({
        resources: [{ type: ConfigResourceTypes.TOPIC, name: topic, configNames: ['cleanup.policy'] }],
        includeSynonyms: false,
      })
      checkEqual(some.resources[0].configEntries.map(e => [e.configName, e.configValue]),
        [['cleanup.policy', 'delete']], 'describeConfigs configNames')  // prettier-ignore

      await admin.deleteTopics({ topics: [topic], timeout: STEP_MS })
      const deadline = Date.now() + STEP_MS
      let after = await admin.listTopics()
      while (after.includes(topic) && Date.now() < deadline) {
        await sleep(200)
        after = await admin.listTopics()
      }
      check(!after.includes(topic), `${topic} still listed after deleteTopics`)
      return { topic, configEntries: Object.keys(entries).length, offsets }
    })
  },

  // idempotent producer: every record is in the log exactly once, offsets contiguous
  async 'idempotent-producer'() {
    const topic = unique('idem')
    await withAdmin(admin => createTopic(admin, topic))
    const baseTs = Date.now() - 60000
    const messages = makeMessages(60, 'idem', baseTs)
    await produce(messages, topic, { idempotent: true, maxInFlightRequests: 1 })
    const offsets = await withAdmin(admin => admin.fetchTopicOffsets(topic))
    const high = offsets.map(o => [o.partition, Number(o.high)]).sort((a, b) => a[0] - b[0])
    checkEqual(high, [[0, 20], [1, 20], [2, 20]], 'high watermarks')
    const { consumer, records } = await consumeUntil(
      unique('idem-g'),
      topic,
      recs => recs.length >= messages.length
    )
    await sleep(500) // a duplicate would show up right behind
    await consumer.disconnect()
    compareRecords(messages, records)
    return { topic, tag: 'idem', baseTs, records: records.length, high }
  },
}

async function main() {
  const fn = scenarios[scenarioName]
  if (!bootstrap || !fn) {
    console.error(`usage: node scenarios.js HOST:PORT (${Object.keys(scenarios).join('|')})`)
    process.exit(2)
  }
  try {
    const result = await fn()
    console.log(JSON.stringify({ ok: true, scenario: scenarioName, ...result }))
  } catch (e) {
    console.log(JSON.stringify({ ok: false, scenario: scenarioName, error: `${e.name}: ${e.message}`,
      type: e.type, stack: e.stack }))  // prettier-ignore
    process.exitCode = 1
  }
}

main().then(() => process.exit())
