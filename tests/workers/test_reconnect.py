"""A worker's prefetch slots survive acks that fail while Redis fails over."""

from __future__ import annotations

from unittest import mock

import pytest
import redis
from kombu.transport import redis as kombu_redis

from workers.reconnect import SlotReleasingQoS


def test_the_redis_channels_use_the_slot_releasing_qos():
    assert kombu_redis.SentinelChannel.QoS is SlotReleasingQoS
    assert kombu_redis.Channel.QoS is SlotReleasingQoS


def test_an_ack_or_reject_that_cannot_reach_redis_still_frees_the_slot():
    channel = mock.MagicMock()
    qos = SlotReleasingQoS(channel, prefetch_count=2)
    message = mock.Mock(_raw={"body": "{}"}, delivery_info={"exchange": "", "routing_key": "q"})
    qos.append(message, "a")
    qos.append(message, "b")
    assert not qos.can_consume()  # both slots taken: no BRPOP goes out

    client = channel.conn_or_acquire.return_value.__enter__.return_value
    client.pipeline.return_value.zrem.return_value.hdel.return_value.execute.side_effect = (
        redis.ConnectionError("the primary is gone"))
    with pytest.raises(redis.ConnectionError):  # still raised: Celery logs it
        qos.ack("a")
    with pytest.raises(redis.ConnectionError):
        qos.reject("b")
    assert qos.can_consume()  # kombu's own QoS would stay full for good
