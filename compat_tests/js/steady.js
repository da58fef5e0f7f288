#!/usr/bin/env node
// A steady KafkaJS load for fault tests: `node steady.js BOOTSTRAP TOPIC COUNT GROUP`.
// An idempotent producer (acks=-1) sends COUNT numbered records one at a time while a group consumer
// reads the topic; stdout gets one line per event, "acked V", "read V" or "error E", then "done"
// once every acknowledged record was read (bounded: 180 s). Retries outlast a leader's failover.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic, countArg, group] = process.argv.slice(2)
const count = Number(countArg)
const kafka = new Kafka({
  clientId: 'steady-kafkajs',
  brokers: bootstrap.split(','),
  logLevel: logLevel.NOTHING,
  connectionTimeout: 3000,
  requestTimeout: 10000,
  retry: { retries: 60, initialRetryTime: 100, maxRetryTime: 1000 },
})

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))
const say = line => process.stdout.write(line + '\n')

async function main() {
  const deadline = Date.now() + 180000
  const read = new Set()
  const consumer = kafka.consumer({ groupId: group, sessionTimeout: 10000, heartbeatInterval: 1000 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ message }) => {
      const v = message.value.toString()
      read.add(v)
      say(`read ${v}`)
    },
  })
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const acked = []
  for (let i = 0; i < count && Date.now() < deadline; i++) {
    const v = String(i).padStart(8, '0')
    try {
      await producer.send({ topic, acks: -1, messages: [{ key: String(i % 7), value: v }] })
      acked.push(v)
      say(`acked ${v}`)
    } catch (e) {
      say(`error ${e.name}: ${e.message}`)
    }
  }
  await producer.disconnect()
  while (Date.now() < deadline && !acked.every(v => read.has(v))) await sleep(100)
  await consumer.disconnect()
  say('done')
}

main()
  .catch(e => say(`error ${e.name}: ${e.message}`))
  .then(() => process.exit())
